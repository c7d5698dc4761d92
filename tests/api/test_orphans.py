"""Orphaned runs: a store row whose workflow Temporal never started (the API died between the
insert and the start) is failed once it is older than ORPHAN_GRACE, and left alone before that
(a start may still be on its way). A read shows the verdict at once and writes nothing; the
API's background reconciler writes it, and then the lists agree."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone

from api.runs_service import ORPHAN_GRACE
from store import repository, run_progress
from workflows.types import Budget, Goal, ProposerConfig

NEVER_STARTED = "the run's workflow was never started in Temporal"


def insert_run(api, run_id: str, *, age: timedelta, status: str = "running") -> None:
    """A row as POST /runs writes it before starting the workflow, created ``age`` ago; no workflow."""
    with api.db() as session:
        run = repository.create_run(
            session,
            run_id=run_id,
            problem="kda",
            goal=Goal(target=2.0),
            budget=Budget(iterations=5),
            proposer=ProposerConfig(),
            candidates_per_iteration=1,
            workflow_id=run_id,
        )
        run.created_at = datetime.now(timezone.utc) - age
        if status != "running":
            run.status = status


async def read(api, run_id: str) -> dict:
    response = await api.http.get(f"/runs/{run_id}")
    assert response.status_code == 200, response.text
    return response.json()


async def listed(api) -> dict[str, dict]:
    response = await api.http.get("/runs")
    assert response.status_code == 200, response.text
    return {run["id"]: run for run in response.json()["data"]}


def stored(api, run_id: str) -> tuple[str, str]:
    with api.db() as session:
        run = repository.get_run(session, run_id)
        return run.status, run.stop_reason


async def test_an_old_orphan_fails_and_a_young_one_keeps_running(api):
    assert ORPHAN_GRACE == timedelta(minutes=2)
    insert_run(api, "kda-orphan-old", age=ORPHAN_GRACE + timedelta(minutes=1))
    # Well inside the grace: a slow test machine cannot age it past the limit before the read.
    insert_run(api, "kda-orphan-young", age=ORPHAN_GRACE - timedelta(seconds=60))

    old = await read(api, "kda-orphan-old")
    assert (old["status"], old["stop_reason"]) == ("failed", NEVER_STARTED)
    young = await read(api, "kda-orphan-young")
    assert (young["status"], young["stop_reason"]) == ("running", "")
    # The reads wrote nothing: the store still says running, so a list filtered by the store's
    # status finds no failed run yet (the list's items show the verdict, as the read does).
    assert stored(api, "kda-orphan-old") == ("running", "")
    assert (await listed(api))["kda-orphan-old"]["status"] == "failed"
    assert (await api.http.get("/runs", params={"status": "failed"})).json()["count"] == 0

    # One reconciler pass writes the verdict: the list (which reads only the store) agrees, and a
    # second read of the failed run (terminal now, so Temporal is not asked again) says the same.
    repairs = await api.reconcile()
    assert [(r.run_id, r.status, r.stop_reason) for r in repairs] == [("kda-orphan-old", "failed", NEVER_STARTED)]
    runs = await listed(api)
    assert (runs["kda-orphan-old"]["status"], runs["kda-orphan-old"]["stop_reason"]) == ("failed", NEVER_STARTED)
    assert (runs["kda-orphan-young"]["status"], runs["kda-orphan-young"]["stop_reason"]) == ("running", "")
    failed = (await api.http.get("/runs", params={"status": "failed"})).json()
    assert [run["id"] for run in failed["data"]] == ["kda-orphan-old"] and failed["count"] == 1
    assert await read(api, "kda-orphan-old") == {**old, "updated_at": runs["kda-orphan-old"]["updated_at"]}
    assert stored(api, "kda-orphan-old") == ("failed", NEVER_STARTED)
    assert stored(api, "kda-orphan-young") == ("running", "")
    assert await api.reconcile() == []  # nothing left to repair


async def test_a_paused_orphan_past_the_grace_fails_too(api):
    insert_run(api, "kda-orphan-paused", age=ORPHAN_GRACE * 3, status="paused")
    run = await read(api, "kda-orphan-paused")
    assert (run["status"], run["stop_reason"]) == ("failed", NEVER_STARTED)
    assert stored(api, "kda-orphan-paused") == ("paused", "")
    await api.reconcile()
    assert (await listed(api))["kda-orphan-paused"]["status"] == "failed"


async def test_a_finished_row_without_a_workflow_is_left_as_it_is(api):
    """A run the store already calls finished is not an orphan, however old: its reason stays."""
    insert_run(api, "kda-done-long-ago", age=timedelta(days=3), status="completed")
    with api.db() as session:
        run_progress.record_progress(session, "kda-done-long-ago", stop_reason="goal_reached")
    run = await read(api, "kda-done-long-ago")
    assert (run["status"], run["stop_reason"]) == ("completed", "goal_reached")
    assert await api.reconcile() == []
    assert stored(api, "kda-done-long-ago") == ("completed", "goal_reached")


async def test_an_old_run_whose_workflow_runs_is_not_an_orphan(api):
    """Age alone does not fail a run: only a workflow Temporal has never heard of does."""
    response = await api.http.post("/runs", json={"problem": "kda", "budget": {"iterations": 5}})
    assert response.status_code == 201, response.text
    run_id = response.json()["id"]
    with api.db() as session:
        repository.get_run(session, run_id).created_at = datetime.now(timezone.utc) - ORPHAN_GRACE * 5
    run = await read(api, run_id)
    assert (run["status"], run["stop_reason"]) == ("running", "")
    assert run["live"] is True  # the stand-in workflow answered the status query
    assert await api.reconcile() == []
    assert (await listed(api))[run_id]["status"] == "running"
    await api.http.post(f"/runs/{run_id}/stop")


async def test_a_workflow_closed_from_outside_is_shown_at_once_and_written_by_the_reconciler(api):
    """Terminated in Temporal, so it never records its end: GET says failed while the row still
    says running (GET never writes), until a reconciler pass ends the row."""
    response = await api.http.post("/runs", json={"problem": "kda", "budget": {"iterations": 5}})
    run_id = response.json()["id"]
    await api.client.get_workflow_handle(run_id).terminate(reason="test")
    for _ in range(2):  # a second read still finds the row untouched
        run = await read(api, run_id)
        assert (run["status"], run["stop_reason"]) == ("failed", "the workflow was terminated")
        assert stored(api, run_id) == ("running", "")
    assert [r.run_id for r in await api.reconcile()] == [run_id]
    assert stored(api, run_id) == ("failed", "the workflow was terminated")
    assert (await listed(api))[run_id]["status"] == "failed"


async def test_the_api_runs_the_reconciler_in_the_background(api, extra_api):
    """With reconcile_every_s set, the API's lifespan repairs orphans by itself: the list, which
    reads only the store, turns to failed without anyone reading the run."""
    insert_run(api, "kda-orphan-background", age=ORPHAN_GRACE * 2)
    settings = api.settings.model_copy(update={"reconcile_every_s": 0.2})

    async def client_factory():
        return api.client

    http = await extra_api(settings, client_factory)
    deadline = time.monotonic() + 20
    while stored(api, "kda-orphan-background")[0] != "failed":
        assert time.monotonic() < deadline, "the background reconciler did not end the orphan within 20 s"
        await asyncio.sleep(0.1)
    listing = (await http.get("/runs", params={"status": "failed"})).json()
    assert [(r["id"], r["stop_reason"]) for r in listing["data"]] == [("kda-orphan-background", NEVER_STARTED)]
