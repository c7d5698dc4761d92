"""Where problems are found by name."""

from __future__ import annotations

import importlib

from kernels.problem import Problem

_DEFINITIONS = {
    "kda": "kernels.kda.definition",
    "mla-decode": "kernels.mla.definition",
}


def problem_names() -> list[str]:
    return list(_DEFINITIONS)


def get_problem(name: str) -> Problem:
    """Return the problem called ``name``; an unknown name raises ValueError listing the known ones."""
    if name not in _DEFINITIONS:
        known = ", ".join(problem_names())
        raise ValueError(f"unknown problem {name!r}; known problems: {known}")
    return importlib.import_module(_DEFINITIONS[name]).PROBLEM
