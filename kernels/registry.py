"""Where problems are found by name.

Three kinds of name:

- a built-in problem (``kda``, ``kda-general``, ``kda-varlen``, ``mla-decode``,
  ``mla-decode-paged``), shipped in ``kernels/``;
- a problem an installed package declares under the entry point group ``marathon.problems``
  (``[project.entry-points."marathon.problems"]`` in its ``pyproject.toml``, the entry point's
  name being the problem's name and its value ``"package.module:PROBLEM"``), found through
  ``importlib.metadata`` on the machine that looks it up;
- an object path ``"package.module:OBJECT"`` (tests and ``marathon problem check`` use these).

Looking up a name never imports torch or triton: a definition module keeps those inside its
callables (kernels/problem.py).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass
from importlib import metadata

from kernels.problem import Problem, load_object

ENTRY_POINT_GROUP = "marathon.problems"
# The description key of an entry point a CPU worker found but could not register: written by
# marathon/problem_registration.py, named by the API's refusals (api/problem_catalog.py).
REFUSED = "refused"
_PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))

_DEFINITIONS = {
    "kda": "kernels.kda.definition",
    "kda-general": "kernels.kda.general",
    "kda-varlen": "kernels.kda.varlen_definition",
    "mla-decode": "kernels.mla.definition",
    "mla-decode-paged": "kernels.mla.paged_definition",
}


def builtin_problem_names() -> list[str]:
    return list(_DEFINITIONS)


def entry_point_problems() -> dict[str, str]:
    """Problem name -> object path, for every installed entry point of the ``marathon.problems``
    group. A name declared twice with different paths, or one that shadows a built-in, raises
    ValueError naming both: which one would be judged must never depend on install order."""
    found: dict[str, str] = {}
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name in _DEFINITIONS:
            raise ValueError(f"entry point {entry.name!r} = {entry.value!r} ({ENTRY_POINT_GROUP}) "
                             f"has the name of a built-in problem; rename it")
        if found.get(entry.name, entry.value) != entry.value:
            raise ValueError(f"problem {entry.name!r} is declared twice in {ENTRY_POINT_GROUP}: "
                             f"{found[entry.name]!r} and {entry.value!r}; uninstall one of them")
        found[entry.name] = entry.value
    return dict(sorted(found.items()))


def problem_names() -> list[str]:
    """Built-in problems first, then the installed entry points' problems, by name."""
    return builtin_problem_names() + list(entry_point_problems())


def object_path(name: str) -> str:
    """``"package.module:OBJECT"`` of the problem called ``name`` (an object path is its own)."""
    if ":" in name:
        return name
    if name in _DEFINITIONS:
        return f"{_DEFINITIONS[name]}:PROBLEM"
    declared = entry_point_problems()
    if name not in declared:
        known = ", ".join(builtin_problem_names() + list(declared))
        raise ValueError(f"unknown problem {name!r}; known problems: {known} (a problem of your own: "
                         f"declare it under [project.entry-points.\"{ENTRY_POINT_GROUP}\"] and install "
                         f"its package, or give its object path 'package.module:PROBLEM')")
    return declared[name]


def find_object_paths_here(name: str) -> None:
    """Let an object path name a module next to the caller, as ``python -m`` would find it: the
    current directory goes on ``sys.path`` (the commands that take a problem name share this,
    so a path ``problem check`` accepts, ``judge`` accepts too)."""
    import sys

    if ":" in name and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def get_problem(name: str) -> Problem:
    """Return the problem called ``name``; an unknown name raises ValueError listing the known ones.

    A name of the form ``"package.module:ATTRIBUTE"`` loads a problem defined elsewhere (tests
    use this for tiny toy problems). An entry point's problem must carry the entry point's name.
    """
    if ":" not in name and name in _DEFINITIONS:
        return importlib.import_module(_DEFINITIONS[name]).PROBLEM
    path = object_path(name)
    problem = load_object(path)
    if not isinstance(problem, Problem):
        raise ValueError(f"{path!r} is not a kernels.problem.Problem (it is a {type(problem).__name__})")
    if ":" not in name and problem.name != name:
        raise ValueError(f"entry point {name!r} of {ENTRY_POINT_GROUP} loads {path!r}, whose name is "
                         f"{problem.name!r}: the two must be the same")
    return problem


@dataclass(frozen=True)
class ProblemSource:
    """What a fresh process (the judge's children run ``python -I``: no PYTHONPATH, no entry
    points of their own) needs to load a problem: its object path, the directories to put on
    ``sys.path``, and the directories (or file) holding its code, which the sandbox must read."""

    path: str
    import_roots: tuple[str, ...] = ()
    code: tuple[str, ...] = ()


def problem_source(name: str) -> ProblemSource:
    """Where the problem called ``name`` lives. Built-ins and object paths travel by name (the
    judge has always loaded those); an entry point's problem travels as its object path plus
    the folder of its top-level package."""
    if name in _DEFINITIONS:
        return ProblemSource(name)
    path = object_path(name)
    top = path.partition(":")[0].split(".")[0]
    spec = importlib.util.find_spec(top)
    if spec is None:
        raise ValueError(f"problem {name!r}: its package {top!r} ({path}) is not importable")
    if spec.submodule_search_locations:
        code = tuple(os.path.realpath(p) for p in spec.submodule_search_locations)
    else:
        code = (os.path.realpath(spec.origin),) if spec.origin else ()
    roots = tuple(dict.fromkeys(os.path.dirname(p) for p in code))
    if ":" in name and roots == (_PROJECT_ROOT,):
        # Object paths imported from this checkout's root (tests' toy problems): the judge's
        # children have that root on their path, and the sandbox reads their module file only.
        return ProblemSource(name)
    return ProblemSource(path, roots, code)
