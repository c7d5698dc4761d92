"""A steering call either takes effect and answers success, or answers an error and changes
nothing; a run that ends while it is steered answers 409 (it no longer takes steering), never
503 ("Temporal could not run update ... aborted by closing workflow") and never a half-kept row."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from fastapi import HTTPException
from temporalio import workflow
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from api.routes import steering
from api.temporal import TemporalGateway
from workflows.types import Goal, OptimizeInput, OptimizeResult, RunStatus


@workflow.defn(name="OptimizeKernelWorkflow")
class EndsWhileSteered:
    """Takes a goal update and never finishes it; ends when told to stop, with the update in flight."""

    def __init__(self) -> None:
        self.stopped = False
        self.updates_started = 0

    @workflow.run
    async def run(self, input: OptimizeInput) -> OptimizeResult:
        self.input = input
        await workflow.wait_condition(lambda: self.stopped, timeout=timedelta(minutes=10))
        return OptimizeResult(run_id=input.run_id, status="stopped", stop_reason="stopped", iterations=0)

    @workflow.signal
    def stop(self) -> None:
        self.stopped = True

    @workflow.update(unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON)
    async def set_goal(self, goal: Goal) -> RunStatus:
        self.updates_started += 1
        await workflow.wait_condition(lambda: False)
        raise AssertionError("unreachable")

    @workflow.query
    def updates(self) -> int:
        return self.updates_started


@pytest.fixture
async def closing_api(bare_api):
    worker = Worker(
        bare_api.client, task_queue=bare_api.task_queue, workflows=[EndsWhileSteered],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    async with worker:
        yield bare_api


async def _steering_count(api, run_id: str) -> int:
    return (await api.http.get(f"/runs/{run_id}/steering")).json()["count"]


async def test_a_goal_change_on_a_run_that_ends_meanwhile_is_409_and_leaves_no_row(closing_api):
    api = closing_api
    created = await api.http.post("/runs", json={"problem": "kda", "gpu_arch": "cpu"})
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    handle = api.client.get_workflow_handle(run_id)
    patch = asyncio.create_task(api.http.patch(f"/runs/{run_id}/goal", json={"target": 3.0}))
    for _ in range(100):
        if await handle.query("updates") == 1:
            break
        await asyncio.sleep(0.05)
    assert await handle.query("updates") == 1, "the update never reached the workflow"
    await handle.signal("stop")
    response = await patch
    assert response.status_code == 409, response.text
    assert "ended while this goal request was delivered; nothing changed" in response.json()["detail"]
    assert await _steering_count(api, run_id) == 0


async def test_a_signal_to_a_run_that_ended_after_its_check_is_409_and_leaves_no_row(closing_api):
    """The window between the liveness check and the signal, taken by a run that ends in it."""
    api = closing_api
    run_id = (await api.http.post("/runs", json={"problem": "kda", "gpu_arch": "cpu"})).json()["id"]
    await api.client.get_workflow_handle(run_id).signal("stop")
    await api.client.get_workflow_handle(run_id).result()
    gateway = TemporalGateway(api.settings, api._client)
    with pytest.raises(HTTPException) as refused:
        await steering._steer(api.settings, gateway, run_id, "pause", {}, lambda: gateway.signal(run_id, "pause"))
    assert refused.value.status_code == 409
    assert await _steering_count(api, run_id) == 0


async def test_a_failed_delivery_to_a_live_run_keeps_its_error_and_leaves_no_row(closing_api):
    api = closing_api
    run_id = (await api.http.post("/runs", json={"problem": "kda", "gpu_arch": "cpu"})).json()["id"]
    gateway = TemporalGateway(api.settings, api._client)
    missing = f"no-such-signal-{uuid.uuid4().hex[:6]}"

    async def refused() -> None:
        raise RuntimeError(missing)

    with pytest.raises(RuntimeError, match=missing):
        await steering._steer(api.settings, gateway, run_id, "pause", {}, refused)
    assert await _steering_count(api, run_id) == 0
    await api.client.get_workflow_handle(run_id).signal("stop")
