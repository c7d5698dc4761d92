"""The API's background reconciler: the one writer that repairs run rows whose workflow is gone.

A row the store calls running or paused normally ends through the workflow itself (its
record_run activity writes the final status). Two cases never get that record: a start that died
half-way (the API crashed between the insert and the start, so Temporal never heard of the run)
and a workflow closed from outside (terminated, timed out, failed before recording). Every
``every_s`` seconds this task asks Temporal about each live row and writes the verdict
(``runs_service.ended_verdict``) with ``run_progress.mark_ended``, which never touches a row that
has already finished. GET routes show the same verdict without writing it, so a read and a later
list agree once a pass has run.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Optional

from fastapi.concurrency import run_in_threadpool

from api.runs_service import ended_verdict
from api.temporal import LiveState
from store import run_progress
from store.db import session_scope
from store.models import Run

log = logging.getLogger(__name__)

# Runs asked about at once: each question is a describe and a query (3 s at most each).
PARALLEL_QUESTIONS = 20


@dataclass
class Repair:
    run_id: str
    status: str
    stop_reason: str


def _live_rows(url: str) -> list[Run]:
    with session_scope(url, read_only=True) as session:
        return run_progress.live_runs(session)


def _write(url: str, repairs: list[Repair]) -> list[Repair]:
    with session_scope(url) as session:
        return [
            repair
            for repair in repairs
            if run_progress.mark_ended(session, repair.run_id, status=repair.status, stop_reason=repair.stop_reason)
        ]


async def reconcile_once(url: str, temporal, now: Optional[datetime] = None) -> list[Repair]:
    """One pass: ask Temporal about every row the store calls live and end those whose workflow is
    gone or closed. Returns the repairs written. Temporal being unreachable repairs nothing."""
    rows = await run_in_threadpool(_live_rows, url)
    now = now or datetime.now(timezone.utc)
    repairs: list[Repair] = []
    for start in range(0, len(rows), PARALLEL_QUESTIONS):
        batch = rows[start : start + PARALLEL_QUESTIONS]
        states: list[LiveState] = await asyncio.gather(*(temporal.live_state(run.id) for run in batch))
        for run, live in zip(batch, states):
            verdict = ended_verdict(run, live, now)
            if verdict is not None:
                repairs.append(Repair(run.id, *verdict))
    if not repairs:
        return []
    written = await run_in_threadpool(_write, url, repairs)
    for repair in written:
        log.info("run %s ended as %s: %s", repair.run_id, repair.status, repair.stop_reason)
    return written


async def keep_reconciling(url: str, temporal, every_s: float) -> None:
    """``reconcile_once`` now and then every ``every_s`` seconds, until cancelled; a failed pass
    (the database restarting) is logged and the next one tries again."""
    if every_s <= 0:
        raise ValueError(f"the reconciler's interval must be > 0 seconds, got {every_s}")
    while True:
        try:
            await reconcile_once(url, temporal)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("reconciling run rows with Temporal failed; trying again in %g s", every_s)
        await asyncio.sleep(every_s)
