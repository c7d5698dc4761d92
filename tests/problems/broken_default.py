"""A space whose DEFAULT is not one of its values."""

from tests.problems.scaled import SPACE, render  # noqa: F401

DEFAULT = {"block": 48}
