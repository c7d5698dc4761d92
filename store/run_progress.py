"""The run row after its insert: the workflow's progress and the reconciler's repairs.

Who writes which fact of the run row (one owner each):
- ``repository.create_run``: the API's insert (problem, goal, budget, proposer, candidates,
  workflow id, lineage); the workflow's record_run inserts it only for runs started without the API
  (scripts/gpu/loop_on_gpu.py, the loop tests).
- ``record_progress``: the workflow, through its record and record_run activities (status, stop
  reason, iteration, best, goal, budget used).
- ``mark_ended``: the API's background reconciler (api/reconciler.py), for a row whose workflow is
  gone or closed without saying so (never started, terminated); it never overwrites a finished row.
Reads (the API's GET routes) write nothing. Every helper takes an open session and leaves
committing to it.
"""

from __future__ import annotations

from typing import Any, Optional

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from store.models import Run, utcnow
from store.repository import as_dict, check_page

LIVE_STATUSES = ("running", "paused")


def record_progress(
    session: Session,
    run_id: str,
    *,
    status: Optional[str] = None,
    iteration: Optional[int] = None,
    best_speedup: Optional[float] = None,
    best_attempt_id: Optional[int] = None,
    stop_reason: Optional[str] = None,
    goal: Any = None,
    budget_used: Optional[dict[str, float]] = None,
) -> Run:
    """The workflow's word on its run (None leaves a field as it is); an unknown run raises KeyError.
    The iteration never moves backwards: "record" writes N before the workflow's state says N."""
    run = session.get(Run, run_id)
    if run is None:
        raise KeyError(f"run {run_id} not found")
    if status is not None:
        run.status = status
    if iteration is not None:
        run.iteration = max(run.iteration, iteration)
    if best_speedup is not None:
        run.best_speedup = best_speedup
    if best_attempt_id is not None:
        run.best_attempt_id = best_attempt_id
    if stop_reason is not None:
        run.stop_reason = stop_reason
    if goal is not None:
        run.goal = as_dict(goal)
    if budget_used is not None:
        run.budget_used = dict(budget_used)
    run.updated_at = utcnow()
    session.flush()
    return run


def live_runs(session: Session, *, limit: int = 1000) -> list[Run]:
    """Runs the store still calls running or paused, oldest first: what the reconciler checks."""
    check_page(0, limit)
    query = select(Run).where(Run.status.in_(LIVE_STATUSES)).order_by(Run.created_at, Run.id).limit(limit)
    return list(session.scalars(query).all())


def mark_ended(session: Session, run_id: str, *, status: str, stop_reason: str) -> bool:
    """End a row whose workflow is gone or closed without recording it; True if it changed. Only a
    running or paused row is touched, in one UPDATE: a workflow's own recorded end keeps its word."""
    if status in LIVE_STATUSES:
        raise ValueError(f"mark_ended takes a final status, got {status!r}")
    result = session.execute(
        update(Run)
        .where(Run.id == run_id, Run.status.in_(LIVE_STATUSES))
        .values(status=status, stop_reason=stop_reason, updated_at=utcnow())
        .execution_options(synchronize_session="fetch")
    )
    session.flush()
    return result.rowcount == 1
