"""Keyword-only helpers over the store's tables, shared by the API and the record activity.

Every helper takes an open session (``store.db.session_scope``) and leaves committing to it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from datetime import timedelta
from typing import Any, Optional

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from store.models import ApiToken, Attempt, RegisteredProblem, Run, SteeringEvent, utcnow

TOKEN_PREFIX = "mt_"
TOKEN_TOUCH_INTERVAL = timedelta(minutes=1)


def as_dict(value: Any) -> dict[str, Any]:
    """A run's goal, budget or proposer as the JSON column stores it (a dataclass or a dict)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, dict):
        return dict(value)
    raise ValueError(f"expected a dataclass or a dict, got {type(value).__name__}")


def check_page(offset: int, limit: int) -> None:
    """Refuse a page the store will not read: ``offset`` >= 0, 1 <= ``limit`` <= 1000."""
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    if not 1 <= limit <= 1000:
        raise ValueError(f"limit must be between 1 and 1000, got {limit}")


def create_run(
    session: Session,
    *,
    run_id: str,
    problem: str,
    goal: Any,
    budget: Any,
    proposer: Any,
    candidates_per_iteration: int,
    workflow_id: str,
    from_run: Optional[str] = None,
    from_kind: Optional[str] = None,
) -> Run:
    """Insert a run in status ``running``; ``goal``/``budget``/``proposer`` are dataclasses or dicts.
    ``from_run`` names the run it continues (``from_kind`` "continue") or was forked from ("fork")."""
    if candidates_per_iteration < 1:
        raise ValueError(f"candidates_per_iteration must be >= 1, got {candidates_per_iteration}")
    if (from_run is None) != (from_kind is None) or from_kind not in (None, "continue", "fork"):
        raise ValueError(f"from_run and from_kind (continue or fork) go together, got {from_run!r} and {from_kind!r}")
    run = Run(
        id=run_id,
        problem=problem,
        status="running",
        goal=as_dict(goal),
        budget=as_dict(budget),
        proposer=as_dict(proposer),
        candidates_per_iteration=candidates_per_iteration,
        iteration=0,
        stop_reason="",
        workflow_id=workflow_id,
        from_run=from_run,
        from_kind=from_kind,
    )
    session.add(run)
    session.flush()
    return run


def get_run(session: Session, run_id: str) -> Optional[Run]:
    return session.get(Run, run_id)


def delete_run(session: Session, run_id: str) -> bool:
    """Remove a run and its attempts (a run whose workflow never started). True if it existed."""
    run = session.get(Run, run_id)
    if run is None:
        return False
    session.query(Attempt).filter(Attempt.run_id == run_id).delete()
    session.query(SteeringEvent).filter(SteeringEvent.run_id == run_id).delete()
    session.delete(run)
    session.flush()
    return True


def list_runs(
    session: Session,
    *,
    status: Optional[str] = None,
    problem: Optional[str] = None,
    offset: int = 0,
    limit: int = 50,
) -> tuple[list[Run], int]:
    """Runs newest first, filtered by status and problem; returns (page, total matching)."""
    check_page(offset, limit)
    query = select(Run)
    if status is not None:
        query = query.where(Run.status == status)
    if problem is not None:
        query = query.where(Run.problem == problem)
    count = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    page = session.scalars(query.order_by(Run.created_at.desc(), Run.id).offset(offset).limit(limit)).all()
    return list(page), count


def _find_attempt(session: Session, run_id: str, iteration: int, index: int) -> Optional[Attempt]:
    return session.scalar(
        select(Attempt).where(Attempt.run_id == run_id, Attempt.iteration == iteration, Attempt.index == index)
    )


def record_attempt(
    session: Session,
    *,
    run_id: str,
    iteration: int,
    index: int,
    strategy: str,
    knobs: Optional[dict[str, Any]],
    source_sha: str,
    status: str,
    message: str,
    speedup: Optional[float],
    roofline: Optional[float],
    timing_kind: str,
    report_sha: Optional[str],
    is_best: bool,
    gpu_seconds: float,
    llm_sha: Optional[str] = None,
    wall_s: Optional[float] = None,
    wall_share_s: Optional[float] = None,
    gpu_busy_s: Optional[float] = None,
    timing_s: Optional[float] = None,
) -> tuple[Attempt, bool]:
    """Record one attempt once: returns (attempt, created).

    A retry of the same (run_id, iteration, index) returns the row already there with
    created=False, also when two retries race (the loser's insert hits the unique constraint and
    it reads the winner's row). A new best attempt becomes the run's only ``is_best`` attempt.
    Only attempt rows are written: the run's iteration and best are the workflow's progress,
    written by ``store.run_progress.record_progress`` (the record activity calls both in one
    transaction).
    """
    # The keyword arguments are the row's columns, named once in the signature.
    columns = {name: value for name, value in locals().items() if name != "session"}
    if iteration < 0 or index < 0:
        raise ValueError(f"iteration and index must be >= 0, got iteration={iteration} index={index}")
    existing = _find_attempt(session, run_id, iteration, index)
    if existing is not None:
        return existing, False
    if session.get(Run, run_id) is None:
        raise KeyError(f"run {run_id} not found")
    attempt = Attempt(**columns)
    try:
        with session.begin_nested():
            session.add(attempt)
    except IntegrityError:
        existing = _find_attempt(session, run_id, iteration, index)
        if existing is None:
            raise
        return existing, False
    if is_best:
        session.execute(
            update(Attempt)
            .where(Attempt.run_id == run_id, Attempt.id != attempt.id, Attempt.is_best.is_(True))
            .values(is_best=False)
        )
    session.flush()
    return attempt, True


def _run_page(session: Session, model: Any, run_id: str, order: tuple, offset: int, limit: int) -> tuple[list, int]:
    """One page of a run's rows of ``model`` in ``order``, and how many it has in all."""
    check_page(offset, limit)
    count = session.scalar(select(func.count()).select_from(model).where(model.run_id == run_id)) or 0
    page = session.scalars(select(model).where(model.run_id == run_id).order_by(*order).offset(offset).limit(limit))
    return list(page.all()), count


def list_attempts(session: Session, run_id: str, *, offset: int = 0, limit: int = 50) -> tuple[list[Attempt], int]:
    """A run's attempts ordered by (iteration, index); returns (page, total)."""
    return _run_page(session, Attempt, run_id, (Attempt.iteration, Attempt.index), offset, limit)


def get_attempt(session: Session, attempt_id: int) -> Optional[Attempt]:
    return session.get(Attempt, attempt_id)


STEERING_KINDS = ("pause", "resume", "stop", "goal", "hint")


def add_steering(session: Session, *, run_id: str, kind: str, detail: Optional[dict[str, Any]] = None) -> SteeringEvent:
    """Note one steering request (``kind`` in STEERING_KINDS) with the current time."""
    if kind not in STEERING_KINDS:
        raise ValueError(f"steering kind must be one of {', '.join(STEERING_KINDS)}, got {kind!r}")
    if session.get(Run, run_id) is None:
        raise KeyError(f"run {run_id} not found")
    event = SteeringEvent(run_id=run_id, kind=kind, detail=dict(detail or {}), created_at=utcnow())
    session.add(event)
    session.flush()
    return event


def delete_steering(session: Session, event_id: int) -> bool:
    """Remove a steering row (the request it noted never reached the workflow). True if it existed."""
    event = session.get(SteeringEvent, event_id)
    if event is None:
        return False
    session.delete(event)
    session.flush()
    return True


def list_steering(
    session: Session, run_id: str, *, offset: int = 0, limit: int = 100
) -> tuple[list[SteeringEvent], int]:
    """A run's steering requests, oldest first; returns (page, total)."""
    return _run_page(session, SteeringEvent, run_id, (SteeringEvent.created_at, SteeringEvent.id), offset, limit)


def hash_token(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode("utf-8")).hexdigest()


def create_token(session: Session, *, name: str) -> str:
    """Create an API token and return its plaintext, which is shown once: only its hash is stored."""
    if not name:
        raise ValueError("a token needs a name")
    plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(ApiToken(name=name, token_hash=hash_token(plaintext)))
    session.flush()
    return plaintext


def find_token(session: Session, plaintext: str) -> Optional[ApiToken]:
    """The stored token whose hash matches ``plaintext`` (reads only)."""
    if not plaintext:
        return None
    return session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(plaintext)))


def token_needs_touch(token: ApiToken) -> bool:
    """Whether ``last_used_at`` is stale: a write per request would contend with the workers on
    SQLite, and a minute's precision is enough."""
    last = token.last_used_at
    if last is None:
        return True
    now = utcnow()
    if last.tzinfo is None:
        last = last.replace(tzinfo=now.tzinfo)
    return now - last > TOKEN_TOUCH_INTERVAL


def verify_token(session: Session, plaintext: str) -> bool:
    """True when ``plaintext`` is a stored token (and note when it was last used)."""
    token = find_token(session, plaintext)
    if token is None:
        return False
    if token_needs_touch(token):
        token.last_used_at = utcnow()
        session.flush()
    return True


def attempt_series(session: Session, run_id: str) -> list[tuple[int, int, str, Optional[float], bool, bool]]:
    """Every attempt of a run as (iteration, index, status, speedup, is_best, not_confirmed),
    ordered: the run page's plot. ``is_best``: it became the run's best after its confirmation;
    ``not_confirmed``: a challenger whose paired re-timing did not hold up (its figure is the first timing)."""
    rows = session.execute(
        select(Attempt.iteration, Attempt.index, Attempt.status, Attempt.speedup, Attempt.is_best,
               Attempt.message.like("not confirmed%"))
        .where(Attempt.run_id == run_id)
        .order_by(Attempt.iteration, Attempt.index)
    ).all()
    return [(*row[:4], bool(row[4]), bool(row[5])) for row in rows]


def recent_attempts(session: Session, run_id: str, *, limit: int = 100) -> list[Attempt]:
    """The latest ``limit`` attempts, newest first."""
    check_page(0, limit)
    return list(
        session.scalars(
            select(Attempt)
            .where(Attempt.run_id == run_id)
            .order_by(Attempt.iteration.desc(), Attempt.index.desc())
            .limit(limit)
        ).all()
    )


# What the search proposer reads of each past attempt, in this order.
HISTORY_COLUMNS = (Attempt.iteration, Attempt.index, Attempt.strategy, Attempt.knobs, Attempt.status,
                   Attempt.speedup, Attempt.message, Attempt.roofline)


def attempt_history(session: Session, run_id: str, *, before_iteration: int) -> list[tuple]:
    """The run's attempts of iterations before ``before_iteration`` as plain tuples of
    HISTORY_COLUMNS, ordered by (iteration, index).

    One query over the (run_id, iteration, index) unique index, without sources, reports or
    timestamps: the proposer re-reads its history every iteration, thousands of rows late in a run."""
    if before_iteration < 0:
        raise ValueError(f"before_iteration must be >= 0, got {before_iteration}")
    rows = session.execute(
        select(*HISTORY_COLUMNS)
        .where(Attempt.run_id == run_id, Attempt.iteration < before_iteration)
        .order_by(Attempt.iteration, Attempt.index)
    ).all()
    return [tuple(row) for row in rows]


# A worker's identity holds its pid, so each restart registers anew; the oldest are forgotten.
REGISTRANTS_KEPT = 16


def register_problem(session: Session, *, name: str, description: dict[str, Any], source: str, worker: str) -> None:
    """Insert or refresh the registration of problem ``name`` (the last worker to start wins)."""
    if not name or len(name) > 200:
        raise ValueError(f"a problem name has 1 to 200 characters, got {len(name)}: {name[:40]!r}")
    row = session.get(RegisteredProblem, name)
    if row is None:
        row = RegisteredProblem(name=name)
        session.add(row)
    row.description = dict(description)
    row.source = source[:1000]
    row.worker = worker[:300]
    row.workers = ([w for w in (row.workers or []) if w != row.worker] + [row.worker])[-REGISTRANTS_KEPT:]
    row.registered_at = utcnow()
    session.flush()


def list_registered_problems(session: Session) -> list[RegisteredProblem]:
    return list(session.scalars(select(RegisteredProblem).order_by(RegisteredProblem.name)).all())


def get_registered_problem(session: Session, name: str) -> Optional[RegisteredProblem]:
    return session.get(RegisteredProblem, name)


def forget_registered_problem(session: Session, name: str) -> None:
    """Drop ``name``'s row (a worker's refusal of an entry point no longer installed)."""
    row = session.get(RegisteredProblem, name)
    if row is not None:
        session.delete(row)
        session.flush()


def busy_rows(session: Session, run_id: str) -> list[tuple]:
    """(wall_s, wall_share_s, gpu_busy_s, timing_s) of the run's measured attempts (``store/busy.py``)."""
    rows = session.execute(
        select(Attempt.wall_s, Attempt.wall_share_s, Attempt.gpu_busy_s, Attempt.timing_s).where(
            Attempt.run_id == run_id, Attempt.wall_s.is_not(None)
        )
    ).all()
    return [tuple(row) for row in rows]
