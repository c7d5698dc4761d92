"""Pause, resume, stop, goal changes and hints reach the workflow; finished runs answer 409."""

from __future__ import annotations

import asyncio

from store import repository
from workflows.types import Notebook, RunStatus


async def start(api) -> str:
    response = await api.http.post("/runs", json={"problem": "kda", "goal": {"speedup": 2.0}})
    assert response.status_code == 201, response.text
    return response.json()["id"]


async def query_status(api, run_id: str) -> RunStatus:
    return await api.client.get_workflow_handle(run_id).query("status", result_type=RunStatus)


async def test_read_run_merges_the_status_query(api):
    run_id = await start(api)
    run = (await api.http.get(f"/runs/{run_id}")).json()
    assert run["live"] is True and run["status"] == "running"
    assert run["iteration"] == 3 and run["best_speedup"] == 1.25 and run["phase"] == "proposing"
    assert run["budget_used"] == {"iterations": 3.0}
    # GET never writes: the row keeps what the API inserted (the workflow records its own progress).
    with api.db() as session:
        row = repository.get_run(session, run_id)
        assert (row.iteration, row.best_speedup, row.status, row.budget_used) == (0, None, "running", None)


async def test_pause_and_resume_reach_the_workflow(api):
    run_id = await start(api)
    response = await api.http.post(f"/runs/{run_id}/pause")
    assert response.status_code == 202 and response.json() == {"id": run_id, "signal": "pause"}
    assert (await query_status(api, run_id)).status == "paused"
    assert (await api.http.get(f"/runs/{run_id}")).json()["status"] == "paused"
    with api.db() as session:  # the read wrote nothing (the real workflow records its pause itself)
        assert repository.get_run(session, run_id).status == "running"
    assert (await api.http.post(f"/runs/{run_id}/resume")).status_code == 202
    assert (await query_status(api, run_id)).status == "running"


async def test_stop_finishes_the_run_and_then_actions_are_409(api):
    run_id = await start(api)
    assert (await api.http.post(f"/runs/{run_id}/stop")).status_code == 202
    await api.client.get_workflow_handle(run_id).result()
    run = (await api.http.get(f"/runs/{run_id}")).json()
    assert run["status"] == "stopped" and run["stop_reason"] == "stopped"
    for action, verb in (("pause", "paused"), ("resume", "resumed"), ("stop", "stopped")):
        response = await api.http.post(f"/runs/{run_id}/{action}")
        assert response.status_code == 409
        assert response.json() == {"detail": f"run {run_id} is stopped; it can no longer be {verb}"}
    response = await api.http.patch(f"/runs/{run_id}/goal", json={"target": 3.0})
    assert response.status_code == 409
    assert response.json() == {"detail": f"run {run_id} is stopped; it can no longer be changed"}


async def test_actions_on_a_run_that_temporal_closed_are_409(api):
    """The store still says running (nobody told it), but Temporal knows the workflow ended."""
    run_id = await start(api)
    await api.client.get_workflow_handle(run_id).terminate(reason="test")
    response = await api.http.post(f"/runs/{run_id}/pause")
    assert response.status_code == 409
    assert response.json() == {"detail": f"run {run_id} is failed; it can no longer be paused"}
    with api.db() as session:
        assert repository.get_run(session, run_id).status == "running"  # the refusal wrote nothing
    await api.reconcile()  # the background reconciler's pass ends the row
    with api.db() as session:
        run = repository.get_run(session, run_id)
        assert run.status == "failed" and run.stop_reason == "the workflow was terminated"


async def test_goal_change_goes_through_the_update(api):
    run_id = await start(api)
    response = await api.http.patch(f"/runs/{run_id}/goal", json={"target": 3.5, "intent": "beat FLA"})
    assert response.status_code == 200, response.text
    goal = {"objective": "speedup", "target": 3.5, "tolerance": 0.0, "intent": "beat FLA"}
    assert response.json() == {"id": run_id, "goal": goal}
    status = await query_status(api, run_id)
    assert status.goal.target == 3.5 and status.goal.intent == "beat FLA"
    assert (await api.http.get(f"/runs/{run_id}")).json()["goal"] == goal
    # The store's goal is the workflow's to record (the real one does at its next step; the stand-in never).
    with api.db() as session:
        assert repository.get_run(session, run_id).goal["target"] == 2.0


async def test_invalid_goal_is_422_with_reasons(api):
    run_id = await start(api)
    response = await api.http.patch(f"/runs/{run_id}/goal", json={"target": -1, "tolerance": 2})
    assert response.status_code == 422
    assert [e["msg"] for e in response.json()["detail"]] == [
        "goal target must be > 0, got -1.0",
        "goal tolerance must be in [0, 1), got 2.0",
    ]
    assert (await query_status(api, run_id)).goal.target == 2.0


async def test_goal_the_workflow_refuses_is_422(api):
    run_id = await start(api)
    response = await api.http.patch(f"/runs/{run_id}/goal", json={"roofline": 0.5})
    assert response.status_code == 422
    assert response.json()["detail"][0]["msg"] == (
        "the run refused the goal: the objective cannot change mid-run (it is speedup)"
    )
    with api.db() as session:
        assert repository.get_run(session, run_id).goal["objective"] == "speedup"


async def test_hints_reach_the_notebook(api):
    run_id = await start(api)
    response = await api.http.post(f"/runs/{run_id}/hints", json={"hint": "try chunk=64 with 8 warps"})
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["id"] == run_id and body["signal"] == "add_hint"
    assert body["kind"] == "knobs" and body["knobs"] == {"chunk": 64} and body["read_by"] == "search"
    handle = api.client.get_workflow_handle(run_id)
    for _ in range(50):
        notebook = await handle.query("notebook", result_type=Notebook)
        if notebook.hints:
            break
        await asyncio.sleep(0.05)
    assert notebook.hints == ["try chunk=64 with 8 warps"]


async def test_empty_hint_is_422(api):
    run_id = await start(api)
    response = await api.http.post(f"/runs/{run_id}/hints", json={"hint": ""})
    assert response.status_code == 422
    assert response.json()["detail"][0]["msg"] == "String should have at least 1 character"
