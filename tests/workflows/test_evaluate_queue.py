"""The evaluation queue has one owner, whoever starts the run: a new run without one fails at
start, saying what to set; a run started before the queue was required (its input has none) keeps
the queue it always meant, on replay and across continue-as-new."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowFailureError, WorkflowHistory
from temporalio.worker import Replayer

from marathon.workers import workflow_runner
from tests.loop_fixtures import FakeLoop, loop_input, loop_workers, unique_queue
from tests.workflows.queue_required_workflow import RefusesOldRunsWithoutAQueue
from workflows.optimize import OptimizeKernelWorkflow
from workflows.rules import input_problems

HISTORY = Path(__file__).parent / "histories" / "optimize-stopped-segment1.json"


def test_input_problems_name_the_missing_queue():
    assert input_problems(loop_input("r", "eval-sm90")) == []
    problems = input_problems(loop_input("r", None))
    assert len(problems) == 1 and problems[0].startswith("evaluate_task_queue must name the task queue")


async def test_a_new_run_without_an_evaluation_queue_fails_at_start(temporal_client):
    fake = FakeLoop()
    queue, run_id = unique_queue(), f"run-{uuid.uuid4().hex[:8]}"
    async with loop_workers(temporal_client, fake, task_queue=queue, evaluate_queue=None):
        with pytest.raises(WorkflowFailureError) as failure:
            await temporal_client.execute_workflow(
                OptimizeKernelWorkflow.run, loop_input(run_id, None), id=run_id, task_queue=queue
            )
    assert "evaluate_task_queue must name the task queue of the evaluation workers" in str(failure.value.cause)
    assert fake.proposals == [] and fake.run_rows == []


def without_queue(how: str) -> WorkflowHistory:
    """The recorded history as a run started before the queue was required would have it."""
    history = json.loads(HISTORY.read_text())
    payload = history["events"][0]["workflowExecutionStartedEventAttributes"]["input"]["payloads"][0]
    run_input = json.loads(base64.b64decode(payload["data"]))
    assert run_input["evaluate_task_queue"]
    if how == "missing":
        del run_input["evaluate_task_queue"]
    else:
        run_input["evaluate_task_queue"] = None
    payload["data"] = base64.b64encode(json.dumps(run_input).encode()).decode()
    return WorkflowHistory.from_json(HISTORY.stem, json.dumps(history))


@pytest.mark.parametrize("how", ["missing", "null"])
async def test_an_old_run_without_a_queue_still_replays(how):
    replayer = Replayer(workflows=[OptimizeKernelWorkflow], workflow_runner=workflow_runner())
    await replayer.replay_workflow(without_queue(how))


async def test_without_the_patch_an_old_run_without_a_queue_would_break():
    replayer = Replayer(workflows=[RefusesOldRunsWithoutAQueue], workflow_runner=workflow_runner())
    with pytest.raises(workflow.NondeterminismError):
        await replayer.replay_workflow(without_queue("missing"))
