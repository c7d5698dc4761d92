"""A CPU worker tells the API which problems it can serve: each one it can load when it starts.

The API does not look for entry points itself (a problem of your own lives in a package the API
need not have). ``marathon worker cpu`` loads every problem it knows (built in, and each entry
point of ``marathon.problems`` installed next to it), and writes each one's public description
(kernels/describe.py) to the store's ``problems`` table, with its own identity. The CPU worker
is the one to do it: it holds the store's URL (marathon/devstack.py role_env), and it is the
one that needs the problem first (the search proposer renders candidates from its space). The
evaluation workers load it by name when they judge; one that lacks the package records the
attempt as ``crashed`` with the loader's message (unknown problem ...).

A problem that cannot be loaded is left out with the reason in the log; the worker still starts.
An installed entry point refused that way (its name differs from its problem's, its module does
not import) is also written to the table, as a refusal: ``{"refused": reason, "entry_point":
value}`` as its description, which the API never lists or runs but names, with the reason, in
the 422 that refuses an unknown problem (api/problem_catalog.py). The log names every entry
point found.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kernels.registry import REFUSED

log = logging.getLogger("marathon.worker")


@dataclass
class Registration:
    registered: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def register_problems(database_url: str, worker: str) -> Registration:
    """Describe every problem this process can load and upsert it into the store."""
    from kernels.describe import describe
    from kernels.registry import get_problem, object_path, problem_names
    from store import repository
    from store.db import session_scope

    outcome = Registration()
    try:
        names = problem_names()
    except ValueError as error:  # conflicting entry points: nothing installed can be trusted by name
        log.error("no problem registered: %s", error)
        outcome.failed["*"] = str(error)
        return outcome
    from kernels.registry import entry_point_problems

    declared = entry_point_problems()
    log.info("entry points found in %s: %s", "marathon.problems",
             ", ".join(f"{k} = {v}" for k, v in declared.items()) or "none")
    described = {}
    for name in names:
        try:
            described[name] = (describe(get_problem(name)), object_path(name))
        except Exception as error:  # a broken user package must not stop the worker
            outcome.failed[name] = f"{type(error).__name__}: {error}"
            log.error("problem %r not registered: it could not be loaded or described: %s "
                      "(marathon problem check %s says more)", name, outcome.failed[name], name)
    with session_scope(database_url) as session:
        for name, (description, source) in described.items():
            repository.register_problem(session, name=name, description=description, source=source, worker=worker)
            outcome.registered.append(name)
        for row in repository.list_registered_problems(session):
            # A refusal of an entry point no longer installed here: its package was fixed or removed.
            if isinstance(row.description, dict) and REFUSED in row.description and row.name not in declared:
                repository.forget_registered_problem(session, row.name)
        for name, reason in outcome.failed.items():
            if name in declared:
                repository.register_problem(session, name=name, source=declared[name], worker=worker,
                                            description={REFUSED: reason, "entry_point": declared[name]})
    log.info("registered problems: %s", ", ".join(outcome.registered) or "none")
    return outcome


def registration_lines(database_url: str) -> list[str]:
    """For ``marathon up``'s banner: the problems workers registered, and each refused entry point
    with why (nothing when the store cannot be read: the banner must not fail for it)."""
    from store import repository
    from store.db import session_scope

    try:
        with session_scope(database_url, read_only=True) as session:
            rows = repository.list_registered_problems(session)
            registered = [r.name for r in rows if not (isinstance(r.description, dict) and REFUSED in r.description)]
            refused = [(r.name, r.source, r.description[REFUSED]) for r in rows if r.name not in registered]
    except Exception:
        return []
    lines = [f"  Problems     built in and {', '.join(registered) or 'none registered'}"]
    lines += [f"  REFUSED      entry point {name} = {source}: {reason}" for name, source, reason in refused]
    return lines
