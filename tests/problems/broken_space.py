"""A space whose seed kernel forgets the scale: it runs, and it is wrong."""

from tests.problems.scaled import DEFAULT, SEED, SPACE  # noqa: F401


def render(point):
    return SEED.format(block=point["block"], factor="1.0")
