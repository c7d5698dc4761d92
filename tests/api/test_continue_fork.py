"""Continue and fork through the API: POST /runs/{id}/continue and POST /runs with "from_run"
start a new run linked to its parent (GET /runs/{id}, the run page), whose workflow input carries
the parent's champion by sha and its notebook; unknown parents, live parents and a fork onto
another problem are refused with what to do. The workflows here are the stand-in; the loop's
side is tests/workflows/test_continue_fork.py."""

from __future__ import annotations

import uuid

from store import repository, run_progress
from store.artifacts import put_text
from workflows.types import Budget, Goal, OptimizeInput, ProposerConfig

CHAMPION_SOURCE = "def kernel(q, kv, scale):\n    # the parent's champion\n    return q\n"
PARENT_ITERATIONS = 4


def make_parent(api, *, status: str = "completed", problem: str = "kda") -> tuple[str, str]:
    """A finished run in the store only (its workflow is long gone): four iterations, the third one's
    kernel its best, and a hint. Returns (run id, the best kernel's sha)."""
    run_id = f"{problem}-parent-{uuid.uuid4().hex[:8]}"
    with api.db() as session:
        repository.create_run(
            session,
            run_id=run_id,
            problem=problem,
            goal=Goal(target=3.0),
            budget=Budget(iterations=PARENT_ITERATIONS, hours=2.0),
            proposer=ProposerConfig(seed=7),
            candidates_per_iteration=3,
            workflow_id=run_id,
        )
        champion = put_text(session, CHAMPION_SOURCE)
        for iteration in range(1, PARENT_ITERATIONS + 1):
            best = iteration == 3
            attempt, _ = repository.record_attempt(
                session,
                run_id=run_id,
                iteration=iteration,
                index=0,
                strategy=f"tile-{16 * iteration}",
                knobs={"BT": 16 * iteration},
                source_sha=champion if best else put_text(session, f"# iteration {iteration}\n"),
                status="ok" if iteration != 2 else "incorrect",
                message="" if iteration != 2 else "max error 3e-2 on shape (1, 64)\nmore detail",
                speedup=1.0 + 0.1 * iteration if iteration != 2 else None,
                roofline=None,
                timing_kind="interpreter",
                report_sha=None,
                is_best=best,
                gpu_seconds=1.0,
            )
            if best:  # what the record activity writes with the attempt
                run_progress.record_progress(session, run_id, best_attempt_id=attempt.id, best_speedup=attempt.speedup)
        repository.add_steering(session, run_id=run_id, kind="hint", detail={"hint": "BT=48"})
        run_progress.record_progress(session, run_id, status=status, iteration=PARENT_ITERATIONS, stop_reason="stopped")
    return run_id, champion


async def started_input(api, run_id: str) -> OptimizeInput:
    """The input the API started the workflow with, read back from its history."""
    history = await api.client.get_workflow_handle(run_id).fetch_history()
    payload = history.events[0].workflow_execution_started_event_attributes.input.payloads[0]
    return api.client.data_converter.payload_converter.from_payload(payload, OptimizeInput)


async def test_continue_starts_a_linked_run_with_the_parents_champion_notebook_and_settings(api):
    parent_id, champion = make_parent(api)
    response = await api.http.post(f"/runs/{parent_id}/continue", json={"iterations": 10})
    assert response.status_code == 201, response.text
    child_id = response.json()["id"]
    assert child_id != parent_id and child_id.startswith("kda-")

    run = (await api.http.get(f"/runs/{child_id}")).json()
    assert (run["from_run"], run["from_kind"]) == (parent_id, "continue")
    assert (run["problem"], run["goal"]["target"], run["proposer"]["seed"], run["candidates_per_iteration"]) == (
        "kda", 3.0, 7, 3
    )
    # Ten more iterations than the parent ran; the parent's hours budget again.
    assert run["budget"]["iterations"] == PARENT_ITERATIONS + 10 and run["budget"]["hours"] == 2.0
    assert (await api.http.get(f"/runs/{parent_id}")).json()["from_run"] is None

    start = (await started_input(api, child_id)).start_from
    assert (start.run_id, start.kind, start.iteration) == (parent_id, "continue", PARENT_ITERATIONS)
    assert start.champion.source_sha == champion and start.champion.knobs == {"BT": 48}
    assert start.champion.speedup == 1.3 and start.champion.iteration == 3
    # No workflow answers for the parent: its notebook is rebuilt from the store.
    assert [(e.iteration, e.strategy, e.status) for e in start.notebook.entries] == [
        (i, f"tile-{16 * i}", "ok" if i != 2 else "incorrect") for i in range(1, PARENT_ITERATIONS + 1)
    ]
    assert start.notebook.entries[1].note == "max error 3e-2 on shape (1, 64)"
    assert start.notebook.hints == ["BT=48"]

    page = await api.http.get(f"/runs/{child_id}/page")
    assert page.status_code == 200
    assert f'Continues run</dt><dd><a id="parent-link" href="/runs/{parent_id}/page">{parent_id}</a>' in page.text


async def test_continue_defaults_to_the_parents_iteration_budget_again_and_takes_a_new_goal(api):
    parent_id, _ = make_parent(api, status="failed")
    response = await api.http.post(f"/runs/{parent_id}/continue", json={"goal": {"speedup": 5.0}})
    assert response.status_code == 201, response.text
    run = (await api.http.get(f"/runs/{response.json()['id']}")).json()
    assert run["budget"]["iterations"] == 2 * PARENT_ITERATIONS and run["goal"]["target"] == 5.0
    # A body is optional.
    response = await api.http.post(f"/runs/{parent_id}/continue")
    assert response.status_code == 201, response.text


async def test_fork_of_a_live_run_takes_its_best_and_live_notebook_with_the_requests_own_settings(api):
    live = await api.http.post("/runs", json={"problem": "kda", "goal": {"speedup": 2.0}})
    live_id = live.json()["id"]
    hint = await api.http.post(f"/runs/{live_id}/hints", json={"hint": "chunk=32"})
    assert hint.status_code == 202, hint.text
    body = {"problem": "kda", "from_run": live_id, "goal": {"speedup": 4.0}, "budget": {"iterations": 7}}
    response = await api.http.post("/runs", json=body)
    assert response.status_code == 201, response.text
    child_id = response.json()["id"]
    run = (await api.http.get(f"/runs/{child_id}")).json()
    assert (run["from_run"], run["from_kind"]) == (live_id, "fork")
    assert run["goal"]["target"] == 4.0 and run["budget"]["iterations"] == 7

    start = (await started_input(api, child_id)).start_from
    assert (start.run_id, start.kind, start.iteration, start.champion) == (live_id, "fork", 0, None)
    # The live parent's workflow answered its notebook query (the stand-in's lessons and hints).
    assert start.notebook.lessons == ["<b>tiles of 64</b> beat 32"] and start.notebook.hints == ["chunk=32"]

    page = await api.http.get(f"/runs/{child_id}/page")
    assert "Forked from run</dt>" in page.text and f'href="/runs/{live_id}/page"' in page.text
    # The lessons reach the page escaped like every notebook text.
    assert "<b>tiles" not in page.text


async def test_fork_of_a_finished_run_carries_its_champion(api):
    parent_id, champion = make_parent(api)
    response = await api.http.post("/runs", json={"problem": "kda", "from_run": parent_id})
    assert response.status_code == 201, response.text
    start = (await started_input(api, response.json()["id"])).start_from
    assert (start.kind, start.iteration, start.champion.source_sha) == ("fork", 0, champion)


async def test_a_live_run_cannot_be_continued_and_is_told_to_stop_or_fork(api):
    live = await api.http.post("/runs", json={"problem": "kda"})
    live_id = live.json()["id"]
    response = await api.http.post(f"/runs/{live_id}/continue", json={"iterations": 5})
    assert response.status_code == 409
    detail = response.json()["detail"]
    assert f"run {live_id} is still running" in detail
    assert f"marathon stop {live_id}" in detail and f"marathon run kda --from {live_id}" in detail


async def test_unknown_parents_are_named(api):
    response = await api.http.post("/runs/kda-nope/continue", json={"iterations": 5})
    assert response.status_code == 404 and response.json() == {"detail": "run kda-nope not found"}
    response = await api.http.post("/runs", json={"problem": "kda", "from_run": "kda-nope"})
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "from_run"] and "no run kda-nope to fork" in error["msg"]
    with api.db() as session:
        assert repository.list_runs(session)[1] == 0


async def test_a_fork_must_keep_its_parents_problem(api):
    parent_id, _ = make_parent(api)
    response = await api.http.post("/runs", json={"problem": "mla-decode", "from_run": parent_id})
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "from_run"]
    assert f"run {parent_id} optimizes problem 'kda', not 'mla-decode'" in error["msg"]
    assert '"problem": "kda"' in error["msg"]


async def test_continue_checks_its_body(api):
    parent_id, _ = make_parent(api)
    for body in ({"iterations": 0}, {"hours": -1}, {"budget": {"iterations": 3}}, {"goal": {"speedup": -2}}):
        response = await api.http.post(f"/runs/{parent_id}/continue", json=body)
        assert response.status_code == 422, (body, response.text)
    # More iterations than any run may have, counting the parent's.
    response = await api.http.post(f"/runs/{parent_id}/continue", json={"iterations": 100_000})
    assert response.status_code == 422
    assert "budget iterations must be between 1 and 100000, got 100004" in response.text
