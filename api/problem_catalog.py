"""Which problems the API accepts: the built-in ones (its own code) and those a worker registered.

The API never looks for entry points itself: a problem of your own lives in a package the API
need not have. A CPU worker that has it installed registers it when it starts (the ``problems``
table, written by marathon/problem_registration.py); from then on it is listed and runs on it
are accepted while one of the workers that registered it polls the CPU queue (so a problem whose
worker is gone is refused with a 409 naming it). A name that is neither is refused with the list
of both kinds (422).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from kernels.describe import describe
from kernels.registry import REFUSED, builtin_problem_names, get_problem
from store import repository
from store.db import session_scope


@dataclass
class Known:
    """One problem the API accepts; ``worker`` is None for a built-in one."""

    name: str
    description: dict[str, Any]
    worker: Optional[str] = None
    registered_at: Any = None
    workers: tuple[str, ...] = ()




def _refused(row) -> bool:
    return isinstance(row.description, dict) and REFUSED in row.description


def known_problems(database_url: str) -> list[Known]:
    """Built-in problems first (described from the API's own code), then registered ones by name."""
    known = [Known(name, describe(get_problem(name))) for name in builtin_problem_names()]
    with session_scope(database_url, read_only=True) as session:
        rows = repository.list_registered_problems(session)
        known += [Known(r.name, dict(r.description), r.worker, r.registered_at) for r in rows
                  if r.name not in builtin_problem_names() and not _refused(r)]
    return known


def registered(database_url: str, name: str) -> Optional[Known]:
    """The problem a worker registered as ``name``; None when none did (or it was refused)."""
    with session_scope(database_url, read_only=True) as session:
        row = repository.get_registered_problem(session, name)
        if row is None or _refused(row):
            return None
        return Known(row.name, dict(row.description), row.worker, row.registered_at, tuple(row.workers or ()))


def not_served_message(known: Known, polling: list[str], queue: str) -> str:
    """Why a registered problem is refused: none of the workers that registered it polls now."""
    return (
        f"run not started: problem {known.name!r} was registered by CPU worker(s) {', '.join(known.workers)}, "
        f"none of which polls task queue {queue} now (polling: {', '.join(polling) or 'none'}). Start a CPU "
        "worker that has its package installed (`marathon up`, or `marathon worker cpu`): it registers the "
        "problem when it starts"
    )


def unknown_message(name: str, database_url: str) -> str:
    """Why ``name`` is refused, naming what is known and who registered it."""
    with session_scope(database_url, read_only=True) as session:
        rows = repository.list_registered_problems(session)
    message = f"unknown problem {name!r}; known problems: {', '.join(builtin_problem_names())}"
    others = [r for r in rows if r.name not in builtin_problem_names() and not _refused(r)]
    if others:
        message += " (built in), " + ", ".join(f"{r.name} (registered by CPU worker {r.worker})" for r in others)
    refused = [r for r in rows if _refused(r)]
    if refused:
        message += ". Entry points found but refused: " + "; ".join(
            f"{r.name} = {r.description.get('entry_point', r.source)} (CPU worker {r.worker}): "
            f"{r.description[REFUSED]}" for r in refused)
        return message + " (`marathon problem check NAME` says more)"
    return message + (
        ". A problem from your own package is known once a CPU worker with that package installed has "
        "started and registered it (README: Your own kernel)"
    )
