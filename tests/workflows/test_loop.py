"""The loop on a real dev server, with the proposer and the evaluator replaced by same-name
fakes, the real compaction, and the real record activities on a SQLite store."""

from __future__ import annotations

import uuid

import pytest

from activities.record import Recorder
from store.db import dispose_engine, session_scope, upgrade
from store.repository import get_run, list_attempts
from tests.loop_fixtures import FakeLoop, loop_input, loop_workers, unique_queue
from workflows import search_attributes as sa
from workflows.optimize import OptimizeKernelWorkflow
from workflows.types import Budget, Goal, OptimizeResult


@pytest.fixture
def store_url(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    yield url
    dispose_engine(url)


def rising(iteration: int, index: int, confirm: bool):
    """Candidate 0 improves each iteration; candidate 2 is always wrong."""
    if index == 2:
        return "incorrect", None
    return "ok", 1.0 + 0.1 * iteration + (0.05 if index == 0 else 0.0)


async def test_run_reaches_iteration_budget_and_records_every_attempt(temporal_client, store_url):
    queue, evaluate_queue = unique_queue(), unique_queue("eval")
    fake = FakeLoop(score=rising, errors={(2, 1): "the reply had no code block"})
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    async with loop_workers(temporal_client, fake, task_queue=queue, evaluate_queue=evaluate_queue, recorder=Recorder(store_url)):
        result: OptimizeResult = await temporal_client.execute_workflow(
            OptimizeKernelWorkflow.run,
            loop_input(run_id, evaluate_queue, budget=Budget(iterations=3), goal=Goal(target=10.0)),
            id=run_id,
            task_queue=queue,
        )
        description = await temporal_client.get_workflow_handle(run_id).describe()
        history = await temporal_client.get_workflow_handle(run_id).fetch_history()

    assert result.status == "completed" and result.stop_reason == "budget_iterations"
    assert result.iterations == 3
    # Best: candidate 0 of iteration 3, confirmed with a second (confirm=True) evaluation.
    assert (result.best.iteration, result.best.index) == (3, 0)
    assert result.best.speedup == pytest.approx(1.35)
    confirmations = [e for e in fake.evaluations if e.confirm]
    assert [(e.iteration, e.index) for e in confirmations] == [(1, 0), (2, 0), (3, 0)]
    # The proposal error was recorded but never evaluated.
    assert (2, 1) not in {(e.iteration, e.index) for e in fake.evaluations if not e.confirm}

    with session_scope(store_url) as session:
        attempts, total = list_attempts(session, run_id, limit=100)
        run = get_run(session, run_id)
        assert total == 9
        by_key = {(a.iteration, a.index): a for a in attempts}
        assert by_key[(2, 1)].status == "proposal_error"
        assert by_key[(1, 2)].status == "incorrect"
        assert [key for key, a in by_key.items() if a.is_best] == [(3, 0)]
        assert (run.status, run.stop_reason, run.iteration) == ("completed", "budget_iterations", 3)
        assert run.best_speedup == pytest.approx(1.35)

    attributes = description.typed_search_attributes
    assert attributes.get(sa.ITERATION) == 3
    assert attributes.get(sa.STATUS) == "completed"
    assert attributes.get(sa.BEST_SPEEDUP) == pytest.approx(1.35)
    assert attributes.get(sa.PROBLEM) == "toy"

    # What the Web UI shows for each step: the activity summaries in the history.
    decode = temporal_client.data_converter.payload_converter.from_payload
    summaries = [
        decode(event.user_metadata.summary, str)
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes") and event.user_metadata.HasField("summary")
    ]
    assert "iter 3 · candidate 1/3 · 1.35× · ok" in summaries
    assert "iter 1 · candidate 3/3 · incorrect" in summaries
    assert "iter 2 · candidate 2/3 · proposal_error" in summaries
    assert "iter 1 · propose 3" in summaries


async def test_goal_reached_stops_the_run(temporal_client):
    queue, evaluate_queue = unique_queue(), unique_queue("eval")
    fake = FakeLoop(score=rising)
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    async with loop_workers(temporal_client, fake, task_queue=queue, evaluate_queue=evaluate_queue):
        result = await temporal_client.execute_workflow(
            OptimizeKernelWorkflow.run,
            loop_input(run_id, evaluate_queue, budget=Budget(iterations=50), goal=Goal(target=1.25)),
            id=run_id,
            task_queue=queue,
        )
    # 1.15 after iteration 1, 1.25 after iteration 2: reached.
    assert (result.stop_reason, result.iterations) == ("goal_reached", 2)
    assert fake.run_rows[-1].status == "completed" and fake.run_rows[-1].stop_reason == "goal_reached"
    assert fake.run_rows[0].create is not None and fake.run_rows[0].create.problem == "toy"
