"""Where problems are found by name."""

from __future__ import annotations

import importlib

from kernels.problem import Problem, load_object

_DEFINITIONS = {
    "kda": "kernels.kda.definition",
    "mla-decode": "kernels.mla.definition",
}


def problem_names() -> list[str]:
    return list(_DEFINITIONS)


def get_problem(name: str) -> Problem:
    """Return the problem called ``name``; an unknown name raises ValueError listing the known ones.

    A name of the form ``"package.module:ATTRIBUTE"`` loads a problem defined elsewhere (tests
    use this for tiny toy problems).
    """
    if ":" in name:
        problem = load_object(name)
        if not isinstance(problem, Problem):
            raise ValueError(f"{name!r} is not a kernels.problem.Problem")
        return problem
    if name not in _DEFINITIONS:
        known = ", ".join(problem_names())
        raise ValueError(f"unknown problem {name!r}; known problems: {known}")
    return importlib.import_module(_DEFINITIONS[name]).PROBLEM
