"""A space whose ``validate`` crashes at every point but DEFAULT (a misspelt knob)."""

from tests.problems.scaled import DEFAULT, SPACE, render  # noqa: F401


def validate(point):
    if point == DEFAULT:
        return []
    return [] if point["blok"] > 0 else ["too small"]
