"""Champions are stored in the order the workflow crowned them.

In the steady loop an iteration's champion is recorded when its confirmation ends, so the records
of two champions can be in flight at once. If the store applied the older one last, the run's
best attempt in the store would be a dethroned one (seen once in a crash test, where a restarted
worker ran the records in another order). Here the older champion's record is made slow on
purpose; the newer champion must still be the run's only best attempt in the store.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio import activity

from activities.record import Recorder
from store.db import dispose_engine, session_scope, upgrade
from store.repository import get_run, list_attempts
from tests.loop_fixtures import FakeLoop, loop_input, loop_workers, unique_queue
from workflows.optimize import OptimizeKernelWorkflow
from workflows.types import Budget, Goal, RecordInput, RecordResult

SLOW_S = 4.0


def score(iteration: int, index: int, confirm: bool) -> tuple[str, float]:
    """Each iteration's candidate 0 beats everything before it: every iteration crowns one."""
    return "ok", (1.0 + iteration) if index == 0 else 0.5


class SlowFirstChampion(Recorder):
    """The store, with the first champion's record held back ``SLOW_S`` seconds."""

    def __init__(self, database_url: str):
        super().__init__(database_url)
        self.order: list[tuple[int, int]] = []

    @activity.defn(name="record")
    async def record(self, input: RecordInput) -> RecordResult:
        if input.is_best and input.iteration == 1:
            await asyncio.sleep(SLOW_S)
        result = await super().record(input)
        if input.is_best:
            self.order.append((input.iteration, input.index))
        return result


@pytest.mark.asyncio
async def test_a_slow_record_of_an_older_champion_does_not_dethrone_the_newer(temporal_client, tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    queue, evaluate_queue = unique_queue("champions"), unique_queue("champions-eval")
    run_id = f"champions-{uuid.uuid4().hex[:8]}"
    recorder = SlowFirstChampion(url)
    try:
        async with loop_workers(temporal_client, FakeLoop(score=score), task_queue=queue,
                                evaluate_queue=evaluate_queue, recorder=recorder):
            handle = await temporal_client.start_workflow(
                OptimizeKernelWorkflow.run,
                loop_input(run_id, evaluate_queue, budget=Budget(iterations=3), goal=Goal(target=100.0),
                           candidates_per_iteration=2, evaluations_in_flight=4),
                id=run_id, task_queue=queue,
            )
            result = await asyncio.wait_for(handle.result(), timeout=120)
        with session_scope(url) as session:
            attempts, _ = list_attempts(session, run_id, limit=100)
            best = [(a.iteration, a.index) for a in attempts if a.is_best]
            run = get_run(session, run_id)
            best_attempt = next(a for a in attempts if a.id == run.best_attempt_id)
            best_at = (best_attempt.iteration, best_attempt.index)
    finally:
        dispose_engine(url)
    assert result.best is not None and (result.best.iteration, result.best.index) == (3, 0)
    # Each champion's record waited for the previous one's, slow as it was.
    assert recorder.order == [(1, 0), (2, 0), (3, 0)]
    assert best == [(3, 0)] and best_at == (3, 0)
