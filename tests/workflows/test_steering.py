"""Steering a live run: status query, pause/resume, hint, set-goal (valid and invalid), stop,
and the self-pause when no evaluation worker is there."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.client import WorkflowUpdateFailedError

from marathon.workers import build_gpu_worker
from tests.loop_fixtures import FakeLoop, loop_input, loop_settings, loop_workers, unique_queue
from workflows.optimize import OptimizeKernelWorkflow
from workflows.types import Budget, Goal, RunStatus


async def wait_for_status(handle, predicate, timeout_s: float = 30.0) -> RunStatus:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        status = await handle.query(OptimizeKernelWorkflow.status)
        if predicate(status):
            return status
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"status never matched; last: {status}")
        await asyncio.sleep(0.1)


async def wait_until(predicate, timeout_s: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition never held")
        await asyncio.sleep(0.05)


async def test_pause_hint_goal_resume_stop(temporal_client):
    queue, evaluate_queue = unique_queue(), unique_queue("eval")
    fake = FakeLoop()
    fake.gate.clear()
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    async with loop_workers(temporal_client, fake, task_queue=queue, evaluate_queue=evaluate_queue):
        handle = await temporal_client.start_workflow(
            OptimizeKernelWorkflow.run,
            loop_input(run_id, evaluate_queue, budget=Budget(iterations=100), goal=Goal(target=5.0)),
            id=run_id,
            task_queue=queue,
        )
        status = await wait_for_status(handle, lambda s: s.phase == "proposing")
        assert (status.status, status.iteration, status.goal.target) == ("running", 0, 5.0)

        await handle.signal(OptimizeKernelWorkflow.pause)
        # The status query says so at once, while iteration 1 still finishes (issue 13).
        pausing = await handle.query(OptimizeKernelWorkflow.status)
        assert pausing.status == "paused" and pausing.phase == "pausing after iteration 1 (proposing)"
        await handle.signal(OptimizeKernelWorkflow.add_hint, "try BT=128 with 8 warps")
        with pytest.raises(WorkflowUpdateFailedError) as rejected:
            await handle.execute_update(OptimizeKernelWorkflow.set_goal, Goal(target=-1.0))
        assert "goal target must be > 0, got -1.0" in str(rejected.value.cause)
        changed = await handle.execute_update(OptimizeKernelWorkflow.set_goal, Goal(target=3.0, intent="beat FLA"))
        assert changed.goal.target == 3.0

        fake.gate.set()  # iteration 1 finishes, then the run holds
        paused = await wait_for_status(handle, lambda s: s.phase == "paused")
        assert paused.status == "paused"
        assert paused.iteration == 1 and paused.message == "paused by user"
        # The distance is to the goal set mid-run (3.0), from the best so far (the fake scores 1.0).
        assert paused.best_speedup == 1.0
        assert paused.distance == pytest.approx((3.0 * (1 - paused.goal.tolerance) - 1.0) / 3.0)
        await asyncio.sleep(0.5)
        assert len(fake.proposals) == 1, "a paused run must not propose"

        await handle.signal(OptimizeKernelWorkflow.resume)
        resumed = await handle.query(OptimizeKernelWorkflow.status)
        assert resumed.status == "running"
        await wait_until(lambda: len(fake.proposals) >= 2)
        second = fake.proposals[1]
        assert "try BT=128 with 8 warps" in second.notebook.hints
        notebook = await handle.query(OptimizeKernelWorkflow.notebook)
        assert "try BT=128 with 8 warps" in notebook.hints  # what the run page shows
        assert second.goal.target == 3.0 and second.goal.intent == "beat FLA"

        await handle.signal(OptimizeKernelWorkflow.stop)
        result = await handle.result()
        final = await handle.query(OptimizeKernelWorkflow.status)

    assert (result.status, result.stop_reason) == ("stopped", "stopped")
    assert result.iterations in (1, 2)  # iteration 2 finished, or was cancelled by the stop
    assert final.status == "stopped" and final.goal.target == 3.0
    statuses = [row.status for row in fake.run_rows]
    assert "paused" in statuses and statuses[-1] == "stopped"
    assert fake.run_rows[-1].goal.target == 3.0


async def test_a_hint_sent_with_the_start_reaches_the_first_proposal(temporal_client):
    # Signal-with-start: the signal is delivered before the run's first line (@workflow.init
    # built the state), so the very first proposal already carries it.
    queue, evaluate_queue = unique_queue(), unique_queue("eval")
    fake = FakeLoop()
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    async with loop_workers(temporal_client, fake, task_queue=queue, evaluate_queue=evaluate_queue):
        handle = await temporal_client.start_workflow(
            OptimizeKernelWorkflow.run,
            loop_input(run_id, evaluate_queue, budget=Budget(iterations=1), goal=Goal(target=5.0)),
            id=run_id,
            task_queue=queue,
            start_signal="add_hint",
            start_signal_args=["start from 8 warps"],
        )
        result = await handle.result()
    assert result.iterations == 1
    assert fake.proposals[0].iteration == 1
    assert "start from 8 warps" in fake.proposals[0].notebook.hints


async def test_missing_evaluation_worker_pauses_the_run_until_resumed(temporal_client):
    queue, evaluate_queue = unique_queue(), unique_queue("eval")
    fake = FakeLoop()
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    async with loop_workers(temporal_client, fake, task_queue=queue, evaluate_queue=None):
        handle = await temporal_client.start_workflow(
            OptimizeKernelWorkflow.run,
            loop_input(run_id, evaluate_queue, budget=Budget(iterations=1), gpu_wait_s=1.0),
            id=run_id,
            task_queue=queue,
        )
        paused = await wait_for_status(handle, lambda s: s.status == "paused")
        assert evaluate_queue in paused.message and paused.iteration == 0
        # The query says paused at once; the store's row follows with the next sync.
        await wait_until(lambda: bool(fake.run_rows) and fake.run_rows[-1].status == "paused")

        gpu = build_gpu_worker(temporal_client, loop_settings(), task_queue=evaluate_queue, activities=[fake.evaluate])
        async with gpu:
            await handle.signal(OptimizeKernelWorkflow.resume)
            result = await handle.result()

    assert (result.stop_reason, result.iterations) == ("budget_iterations", 1)
    # Iteration 1 was proposed again after the resume, and recorded once.
    assert [p.iteration for p in fake.proposals] == [1, 1]
    assert sorted(key[1:] for key in fake.records) == [(1, 0), (1, 1), (1, 2)]


async def test_candidates_and_a_wait_for_a_worker_show_in_the_live_state(temporal_client):
    """The status query lists the iteration's candidates; Temporal's pending activities tell
    the one a worker runs from those waiting for a worker; the API turns that into a line."""
    from api.runs_service import live_candidates, waiting_line
    from api.temporal import TemporalGateway

    queue, evaluate_queue = unique_queue(), unique_queue("eval")
    fake = FakeLoop()
    fake.evaluate_gate.clear()
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    async with loop_workers(temporal_client, fake, task_queue=queue, evaluate_queue=evaluate_queue):
        handle = await temporal_client.start_workflow(
            OptimizeKernelWorkflow.run,
            loop_input(run_id, evaluate_queue, budget=Budget(iterations=100)),
            id=run_id,
            task_queue=queue,
        )
        await wait_for_status(handle, lambda s: s.phase == "evaluating")
        await wait_until(lambda: len(fake.evaluations) == 1)  # one runs, two wait (one at a time)

        async def client():
            return temporal_client

        gateway = TemporalGateway(loop_settings(), client)
        live = await gateway.live_state(run_id)
        assert live.run_status is not None and live.run_status.candidates_iteration == 1
        assert live.run_status.evaluate_queue == evaluate_queue
        assert [c.state for c in live.run_status.candidates] == ["evaluating"] * 3
        # Temporal hands out queued work in no set order: any one of the three may be the one running.
        started = [e.started for e in live.evaluations]
        assert sorted(started) == [False, False, True]
        states = [row["state"] for row in live_candidates(live)]
        for running, state in zip(started, states):
            assert state == "evaluating" if running else state.startswith("queued (")
        # The one worker is busy: the others are queued, as they normally are; nothing is wrong.
        assert waiting_line(live) == f"queued: 2 candidates, 1 evaluation worker busy on {evaluate_queue}"

        fake.evaluate_gate.set()
        await wait_for_status(handle, lambda s: s.iteration >= 1)
        await handle.signal(OptimizeKernelWorkflow.stop)
        await handle.result()
        final = await handle.query(OptimizeKernelWorkflow.status)
    # The last iteration's candidates: judged, or cancelled by the stop.
    assert final.candidates and all(c.state == "cancelled" or c.state.startswith("ok") for c in final.candidates)


async def test_stop_cancels_evaluations_in_flight(temporal_client):
    queue, evaluate_queue = unique_queue(), unique_queue("eval")
    fake = FakeLoop()
    fake.evaluate_gate.clear()
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    async with loop_workers(temporal_client, fake, task_queue=queue, evaluate_queue=evaluate_queue):
        handle = await temporal_client.start_workflow(
            OptimizeKernelWorkflow.run,
            loop_input(run_id, evaluate_queue, budget=Budget(iterations=100)),
            id=run_id,
            task_queue=queue,
        )
        await wait_for_status(handle, lambda s: s.phase == "evaluating")
        # The evaluation worker runs one at a time: one evaluation runs, two wait in the queue.
        await wait_until(lambda: len(fake.evaluations) == 1)
        await handle.signal(OptimizeKernelWorkflow.stop)
        result = await handle.result()
        await wait_until(lambda: fake.cancelled_evaluations == 1, timeout_s=90)
        history = await handle.fetch_history()

    assert (result.status, result.stop_reason, result.iterations) == ("stopped", "stopped", 0)
    assert fake.records == {}, "an unfinished iteration is not recorded"
    assert len(fake.evaluations) == 1
    cancels = [e for e in history.events if e.HasField("activity_task_cancel_requested_event_attributes")]
    assert len(cancels) == 3
