"""Continue-as-new when the server suggests it, not only every N iterations: a dev server whose
suggestion threshold is lowered to a few hundred events makes a run that would never reach its
own N=1000 limit continue in several bounded segments, and lose nothing doing so."""

from __future__ import annotations

import uuid

from marathon.temporal_server import DevServer
from tests.loop_fixtures import FakeLoop, constant_score, loop_input, loop_workers, unique_queue
from workflows.optimize import OptimizeKernelWorkflow
from workflows.types import Budget, Goal

SUGGEST_AT_EVENTS = 150
ITERATIONS = 12


async def test_the_server_suggestion_makes_the_run_continue_as_new(tmp_path):
    # Dynamic config of the dev server: suggest continue-as-new once a history has this many events.
    extra = ["--dynamic-config-value", f"limit.historyCount.suggestContinueAsNew={SUGGEST_AT_EVENTS}"]
    with DevServer(log_path=tmp_path / "temporal.log", extra_args=extra) as server:
        client = await server.connect()
        fake = FakeLoop(score=constant_score(1.1))
        queue, evaluate_queue = unique_queue(), unique_queue("eval")
        run_id = f"run-{uuid.uuid4().hex[:8]}"
        async with loop_workers(client, fake, task_queue=queue, evaluate_queue=evaluate_queue):
            handle = await client.start_workflow(
                OptimizeKernelWorkflow.run,
                loop_input(run_id, evaluate_queue, budget=Budget(iterations=ITERATIONS), goal=Goal(target=9.0),
                           continue_as_new_every=1000),
                id=run_id,
                task_queue=queue,
            )
            result = await handle.result()
            status = await handle.query(OptimizeKernelWorkflow.status)
        runs = [run async for run in client.list_workflows(f"WorkflowId = '{run_id}'")]
        lengths = []
        for run in runs:
            description = await client.get_workflow_handle(run_id, run_id=run.run_id).describe()
            lengths.append(description.history_length)

    assert (result.stop_reason, result.iterations) == ("budget_iterations", ITERATIONS)
    assert len(runs) == status.segment >= 2, lengths
    # Each segment stops at the first iteration boundary after the suggestion: one iteration
    # of 3 candidates is well under 150 events, so no segment runs far past the threshold.
    assert max(lengths) < 2 * SUGGEST_AT_EVENTS, lengths
    assert sorted({p.iteration for p in fake.proposals}) == list(range(1, ITERATIONS + 1))
    assert len(fake.records) == ITERATIONS * 3
