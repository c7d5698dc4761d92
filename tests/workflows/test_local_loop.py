"""The in-process loop (``marathon.local_loop``) with the shipped fakes (``marathon.loop_fakes``)
on a real dev server: a run started on it reaches its evaluation worker, a run sent elsewhere is
refused before it starts, and fakes that remember nothing (the soak's) still count."""

from __future__ import annotations

import uuid

import pytest

from marathon.local_loop import local_loop
from marathon.loop_fakes import FakeLoop, constant_score, fake_source_sha
from tests.loop_fixtures import loop_input, loop_settings, unique_queue
from workflows.types import Budget, Goal


async def test_a_run_on_the_local_loop_is_evaluated_by_its_worker(temporal_client):
    fake = FakeLoop(score=constant_score(1.5))
    async with local_loop(
        temporal_client, loop_settings(), task_queue=unique_queue(), evaluate_queue=unique_queue("eval"),
        cpu_activities=fake.cpu_activities(), evaluate_activities=[fake.evaluate],
    ) as loop:
        with pytest.raises(ValueError, match=f"sends its evaluations to 'elsewhere'.*polls '{loop.evaluate_queue}'"):
            await loop.start(loop_input(f"run-{uuid.uuid4().hex[:8]}", "elsewhere"))
        run_id = f"run-{uuid.uuid4().hex[:8]}"
        result = await loop.execute(
            loop_input(run_id, loop.evaluate_queue, budget=Budget(iterations=2), goal=Goal(target=10.0))
        )
    assert (result.stop_reason, result.iterations) == ("budget_iterations", 2)
    assert [p.run_id for p in fake.proposals] == [run_id, run_id]  # the refused run never started
    # Three candidates an iteration, and the champion's confirmation run.
    assert fake.evaluation_calls == len(fake.evaluations) == 7
    assert sorted(key[1:] for key in fake.records) == [(i, k) for i in (1, 2) for k in range(3)]
    assert result.best.speedup == 1.5 and result.best.source_sha == fake_source_sha(1, 0)


async def test_fakes_that_remember_nothing_still_count(temporal_client):
    seen = []
    fake = FakeLoop(score=constant_score(1.1), remember=False, on_record=lambda request: seen.append(request.index))
    async with local_loop(
        temporal_client, loop_settings(), task_queue=unique_queue(), evaluate_queue=unique_queue("eval"),
        cpu_activities=fake.cpu_activities(), evaluate_activities=[fake.evaluate],
    ) as loop:
        result = await loop.execute(loop_input(f"run-{uuid.uuid4().hex[:8]}", loop.evaluate_queue,
                                               budget=Budget(iterations=1), confirm_champions=False))
    assert result.iterations == 1
    assert (fake.proposals, fake.evaluations, fake.records, fake.run_rows) == ([], [], {}, [])
    assert (fake.evaluation_calls, fake.record_calls, seen) == (3, 3, [0, 1, 2])


async def test_evaluate_activities_without_an_evaluation_worker_are_refused(temporal_client):
    fake = FakeLoop()
    with pytest.raises(ValueError, match="evaluate_activities were given with evaluator=False"):
        async with local_loop(temporal_client, loop_settings(), evaluator=False, evaluate_activities=[fake.evaluate]):
            pass
