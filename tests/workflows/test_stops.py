"""Stop rules, champion confirmation and continue-as-new on a real dev server."""

from __future__ import annotations

import uuid

import pytest

from tests.loop_fixtures import FakeLoop, constant_score, loop_input, loop_workers, unique_queue
from workflows.optimize import OptimizeKernelWorkflow
from workflows.types import Budget, Goal


async def run_loop(client, fake: FakeLoop, **overrides):
    queue, evaluate_queue = unique_queue(), unique_queue("eval")
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    async with loop_workers(client, fake, task_queue=queue, evaluate_queue=evaluate_queue):
        handle = await client.start_workflow(
            OptimizeKernelWorkflow.run,
            loop_input(run_id, evaluate_queue, **overrides),
            id=run_id,
            task_queue=queue,
        )
        result = await handle.result()
        status = await handle.query(OptimizeKernelWorkflow.status)
    return run_id, result, status


async def test_plateau_stops_after_iterations_without_improvement(temporal_client):
    fake = FakeLoop(score=constant_score(1.1))
    _, result, _ = await run_loop(
        temporal_client, fake, budget=Budget(iterations=20, plateau_iterations=2), goal=Goal(target=3.0)
    )
    # Best at iteration 1; iterations 2 and 3 bring nothing better.
    assert (result.stop_reason, result.iterations, result.best.iteration) == ("plateau", 3, 1)


async def test_gpu_seconds_budget_counts_confirmations(temporal_client):
    fake = FakeLoop(score=constant_score(1.1))
    _, result, status = await run_loop(temporal_client, fake, budget=Budget(iterations=20, gpu_seconds=6.0))
    # Iteration 1: 3 evaluations + 1 confirmation = 4 s; iteration 2: 3 s -> 7 s >= 6 s.
    assert (result.stop_reason, result.iterations) == ("budget_gpu_seconds", 2)
    assert status.budget_used["gpu_seconds"] == pytest.approx(7.0)


async def test_token_budget(temporal_client):
    fake = FakeLoop(score=constant_score(1.1), tokens_per_proposal=100)
    _, result, _ = await run_loop(temporal_client, fake, budget=Budget(iterations=20, tokens=250))
    assert (result.stop_reason, result.iterations) == ("budget_tokens", 3)
    assert [p.tokens_left for p in fake.proposals] == [250, 150, 50]


async def test_a_champion_that_fails_confirmation_does_not_become_best(temporal_client):
    def score(iteration, index, confirm):
        if index != 0:
            return "ok", 1.0
        if iteration == 2:
            return "ok", (0.9 if confirm else 2.0)  # a lucky first timing
        return "ok", 1.2

    fake = FakeLoop(score=score)
    run_id, result, _ = await run_loop(temporal_client, fake, budget=Budget(iterations=2))
    assert (result.best.iteration, result.best.speedup) == (1, 1.2)
    lucky = fake.records[(run_id, 2, 0)]
    assert not lucky.is_best and lucky.result.message.startswith("not confirmed: first 2x, paired run gave ok 0.9x")
    assert fake.records[(run_id, 1, 0)].is_best
    assert fake.records[(run_id, 1, 0)].result.message.startswith("confirmed: first 1.2x, paired 1.2x")


async def test_continue_as_new_carries_best_notebook_and_counters(temporal_client):
    def score(iteration, index, confirm):
        return "ok", (2.0 if (iteration, index) == (1, 0) else 1.0)

    fake = FakeLoop(score=score)
    run_id, result, status = await run_loop(
        temporal_client,
        fake,
        budget=Budget(iterations=5),
        goal=Goal(target=9.0),
        continue_as_new_every=2,
        notebook_limit=4,
    )
    assert (result.stop_reason, result.iterations) == ("budget_iterations", 5)
    assert (result.best.iteration, result.best.speedup) == (1, 2.0)  # carried across two boundaries
    assert status.segment == 3
    runs = [run async for run in temporal_client.list_workflows(f"WorkflowId = '{run_id}'")]
    assert len(runs) == 3
    # Every attempt before iteration 5 is either still an entry or folded into the aggregates.
    last = fake.proposals[-1]
    assert last.iteration == 5
    assert last.notebook.stats["folded"] + len(last.notebook.entries) == 4 * 3
    assert all(len(p.notebook.entries) <= 4 for p in fake.proposals)
    assert last.notebook.lessons[0].startswith(f"{last.notebook.stats['folded']} earlier attempts")
    assert "s0 2x" in last.notebook.lessons[1]
    # 5 iterations x 3 evaluations + the one confirmation, 1 s each.
    assert status.budget_used["gpu_seconds"] == pytest.approx(16.0)
    assert len(fake.records) == 15


async def test_invalid_input_fails_the_run_with_the_reasons(temporal_client):
    from temporalio.client import WorkflowFailureError

    fake = FakeLoop()
    with pytest.raises(WorkflowFailureError) as failure:
        await run_loop(temporal_client, fake, budget=Budget(iterations=0), candidates_per_iteration=0)
    message = str(failure.value.cause)
    assert "budget iterations must be between 1 and 100000, got 0" in message
    assert "candidates_per_iteration must be between 1 and 64, got 0" in message
    assert fake.proposals == []
