"""Activities "record" and "record_run": the loop's attempts and progress, written to the store.

The workflow owns its run's progress facts (status, stop reason, iteration, best, goal, budget
used) and writes them only through these two activities, both with ``record_progress``: "record"
adds an attempt row and moves the run's iteration and best with it (one transaction, so the
best on the run row is always an attempt that exists); "record_run" writes the rest.

An attempt is keyed by (run_id, iteration, index): a retried activity finds the row already
there and writes nothing twice. The store is synchronous SQLAlchemy, so each write runs in a
thread and the worker's event loop keeps serving other activities.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Optional

from temporalio import activity
from temporalio.exceptions import ApplicationError

from workflows.types import (
    RUN_STATUSES,
    EvaluateResult,
    RecordInput,
    RecordResult,
    RunProgressInput,
    RunProgressResult,
)


def measured_time(result: EvaluateResult) -> dict[str, Optional[float]]:
    """The attempt row's wall, share, busy and timing seconds. A result without a wall time was
    not measured (a proposal error, an evaluation that failed, a result from before these
    fields): all null, so the run's fractions leave it out instead of counting zeros."""
    if not result.wall_s > 0:
        return {"wall_s": None, "wall_share_s": None, "gpu_busy_s": None, "timing_s": None}
    return {
        "wall_s": result.wall_s,
        "wall_share_s": result.wall_share_s,
        "gpu_busy_s": result.gpu_busy_s,
        "timing_s": result.timing_s,
    }


class Recorder:
    """The store-writing activities, bound to one database."""

    def __init__(self, database_url: str) -> None:
        if not database_url:
            raise ValueError("Recorder needs the store's database URL, got none")
        self.database_url = database_url

    @activity.defn(name="record")
    async def record(self, input: RecordInput) -> RecordResult:
        if input.iteration < 0 or input.index < 0:
            raise ApplicationError(
                f"iteration and index must be >= 0, got {input.iteration} and {input.index}",
                type="BadInput",
                non_retryable=True,
            )
        return await asyncio.to_thread(self._record, input)

    def _record(self, input: RecordInput) -> RecordResult:
        from store.db import session_scope
        from store.repository import record_attempt
        from store.run_progress import record_progress

        result, candidate = input.result, input.candidate
        try:
            with session_scope(self.database_url) as session:
                attempt, created = record_attempt(
                    session,
                    run_id=input.run_id,
                    iteration=input.iteration,
                    index=input.index,
                    strategy=candidate.strategy,
                    knobs=candidate.knobs,
                    source_sha=candidate.source_sha,
                    status=result.status,
                    message=result.message,
                    speedup=result.speedup,
                    roofline=result.roofline,
                    timing_kind=result.timing_kind,
                    report_sha=result.report_sha,
                    is_best=input.is_best,
                    gpu_seconds=result.gpu_seconds,
                    llm_sha=candidate.llm_sha,
                    **measured_time(result),
                )
                if created:  # a retry finds the progress its first try wrote in the same transaction
                    record_progress(
                        session,
                        input.run_id,
                        iteration=input.iteration,
                        best_speedup=result.speedup if input.is_best else None,
                        best_attempt_id=attempt.id if input.is_best else None,
                    )
                return RecordResult(attempt_id=attempt.id, created=created)
        except KeyError as error:
            raise ApplicationError(str(error), type="BadInput", non_retryable=True) from error

    @activity.defn(name="record_run")
    async def record_run(self, input: RunProgressInput) -> RunProgressResult:
        if input.status not in RUN_STATUSES:
            raise ApplicationError(
                f"run status must be one of {', '.join(RUN_STATUSES)}, got {input.status!r}",
                type="BadInput",
                non_retryable=True,
            )
        return await asyncio.to_thread(self._record_run, input)

    def _record_run(self, input: RunProgressInput) -> RunProgressResult:
        from store.db import session_scope
        from store.repository import create_run, get_run
        from store.run_progress import record_progress

        created = False
        with session_scope(self.database_url) as session:
            # Runs started through the API have their row already (the API owns the insert). The
            # create path is for runs started without it (scripts/gpu/loop_on_gpu.py and the loop
            # tests execute the workflow directly): their first record_run inserts the row.
            if get_run(session, input.run_id) is None:
                if input.create is None:
                    raise ApplicationError(
                        f"run {input.run_id} is not in the store", type="BadInput", non_retryable=True
                    )
                info = input.create
                create_run(
                    session,
                    run_id=input.run_id,
                    problem=info.problem,
                    goal=dataclasses.asdict(input.goal) if input.goal else {},
                    budget=info.budget,
                    proposer=info.proposer,
                    candidates_per_iteration=info.candidates_per_iteration,
                    workflow_id=info.workflow_id,
                    from_run=info.from_run,
                    from_kind=info.from_kind,
                )
                created = True
            record_progress(
                session,
                input.run_id,
                status=input.status,
                iteration=input.iteration,
                best_speedup=input.best_speedup,
                stop_reason=input.stop_reason,
                goal=input.goal,
                budget_used=input.budget_used,
            )
        return RunProgressResult(created=created)
