"""Reading runs, attempts and the best kernel back; unknown runs are 404 everywhere."""

from __future__ import annotations

import json

import pytest

from store import repository, run_progress
from store.artifacts import put_text
from workflows.types import Budget, Goal, ProposerConfig

BEST_SOURCE = "import triton\n\ndef kernel(q, k, v):\n    return q  # best\n"


def seed_run(api, run_id: str, *, problem: str = "kda", status: str = "running") -> None:
    with api.db() as session:
        repository.create_run(
            session,
            run_id=run_id,
            problem=problem,
            goal=Goal(target=2.5),
            budget=Budget(iterations=9),
            proposer=ProposerConfig(),
            candidates_per_iteration=2,
            workflow_id=run_id,
        )
        if status != "running":
            run_progress.record_progress(session, run_id, status=status, stop_reason="goal_reached")


def seed_attempts(api, run_id: str) -> None:
    with api.db() as session:
        source = put_text(session, BEST_SOURCE)
        report = put_text(session, json.dumps({"status": "ok", "speedup": 1.8}))
        for iteration in (1, 2):
            for index in (1, 0):
                best = (iteration, index) == (2, 1)
                attempt, _ = repository.record_attempt(
                    session,
                    run_id=run_id,
                    iteration=iteration,
                    index=index,
                    strategy=f"tile-{index}",
                    knobs={"BT": 32},
                    source_sha=source,
                    status="ok",
                    message="",
                    speedup=1.8 if best else 1.1,
                    roofline=None,
                    timing_kind="interpreter",
                    report_sha=report if best else None,
                    is_best=best,
                    gpu_seconds=0.25,
                )
                # What the record activity writes with it: the run's iteration and best.
                best_id = attempt.id if best else None
                run_progress.record_progress(session, run_id, iteration=iteration, best_attempt_id=best_id,
                                           best_speedup=1.8 if best else None)


async def test_list_runs_filters_and_paginates(api):
    seed_run(api, "kda-a")
    seed_run(api, "kda-b", status="completed")
    seed_run(api, "mla-c", problem="mla-decode")
    everything = (await api.http.get("/runs")).json()
    assert everything["count"] == 3 and len(everything["data"]) == 3
    done = (await api.http.get("/runs", params={"status": "completed"})).json()
    assert [run["id"] for run in done["data"]] == ["kda-b"] and done["data"][0]["stop_reason"] == "goal_reached"
    kda = (await api.http.get("/runs", params={"problem": "kda", "limit": 1, "offset": 1})).json()
    assert kda["count"] == 2 and len(kda["data"]) == 1
    assert kda["data"][0]["run_page_url"].endswith(f"/runs/{kda['data'][0]['id']}/page")


async def test_list_runs_rejects_unknown_status(api):
    response = await api.http.get("/runs", params={"status": "sleeping"})
    assert response.status_code == 422
    assert (
        response.json()["detail"][0]["msg"] == "Input should be 'running', 'paused', 'completed', 'stopped' or 'failed'"
    )


async def test_read_run_falls_back_to_the_store_without_a_workflow(api):
    seed_run(api, "kda-quiet")
    seed_attempts(api, "kda-quiet")
    run = (await api.http.get("/runs/kda-quiet")).json()
    assert run["status"] == "running" and run["live"] is False
    assert run["iteration"] == 2 and run["best_speedup"] == 1.8
    assert run["distance"] == pytest.approx((2.5 - 1.8) / 2.5)


def seed_measured(api, run_id: str) -> None:
    """Two evaluations that overlapped on one GPU, one on a CPU worker, one proposal error."""
    with api.db() as session:
        for index, figures in enumerate([
            dict(wall_s=10.0, wall_share_s=8.0, gpu_busy_s=6.0, timing_s=2.0),
            dict(wall_s=6.0, wall_share_s=4.0, gpu_busy_s=2.0, timing_s=1.0),
            dict(wall_s=5.0, wall_share_s=5.0, gpu_busy_s=None, timing_s=0.0),
            {},
        ]):
            repository.record_attempt(
                session, run_id=run_id, iteration=1, index=index, strategy="s", knobs=None, source_sha="a" * 64,
                status="ok" if figures else "proposal_error", message="", speedup=None, roofline=None,
                timing_kind="gpu", report_sha=None, is_best=False, gpu_seconds=1.0, **figures,
            )


async def test_run_and_attempts_say_how_busy_the_gpu_was(api):
    seed_run(api, "kda-busy")
    seed_measured(api, "kda-busy")
    run = (await api.http.get("/runs/kda-busy")).json()
    assert run["evaluation_gpu_s"] == pytest.approx(17.0)
    assert run["gpu_busy_fraction"] == pytest.approx(8.0 / 12.0)
    assert run["timing_fraction"] == pytest.approx(3.0 / 17.0)
    attempts = (await api.http.get("/runs/kda-busy/attempts")).json()["data"]
    assert [(a["gpu_busy_fraction"], a["timing_fraction"]) for a in attempts] == [
        (pytest.approx(0.75), pytest.approx(0.2)), (pytest.approx(0.5), pytest.approx(1 / 6)), (None, 0.0),
        (None, None),
    ]
    assert (attempts[0]["wall_s"], attempts[0]["wall_share_s"], attempts[0]["gpu_busy_s"], attempts[0]["timing_s"]) \
        == (10.0, 8.0, 6.0, 2.0)
    # A run with nothing measured (CPU workers before these figures, no attempts yet): nulls.
    seed_run(api, "kda-unmeasured")
    seed_attempts(api, "kda-unmeasured")
    run = (await api.http.get("/runs/kda-unmeasured")).json()
    assert (run["evaluation_gpu_s"], run["gpu_busy_fraction"], run["timing_fraction"]) == (None, None, None)


async def test_attempts_are_paginated_with_iteration_and_index(api):
    seed_run(api, "kda-att")
    seed_attempts(api, "kda-att")
    page = (await api.http.get("/runs/kda-att/attempts", params={"offset": 1, "limit": 2})).json()
    assert page["count"] == 4
    assert [(a["iteration"], a["index"]) for a in page["data"]] == [(1, 1), (2, 0)]
    assert page["data"][0]["strategy"] == "tile-1" and page["data"][0]["knobs"] == {"BT": 32}


async def test_best_is_a_file_download(api):
    seed_run(api, "kda-best")
    seed_attempts(api, "kda-best")
    response = await api.http.get("/runs/kda-best/best")
    assert response.status_code == 200
    assert response.text == BEST_SOURCE
    assert response.headers["content-type"] == "text/x-python; charset=utf-8"
    assert response.headers["content-disposition"] == 'attachment; filename="kda-best-best.py"'
    assert response.headers["x-marathon-iteration"] == "2" and response.headers["x-marathon-index"] == "1"
    assert response.headers["x-marathon-speedup"] == "1.8"


async def test_best_as_json_carries_the_report(api):
    seed_run(api, "kda-best")
    seed_attempts(api, "kda-best")
    body = (await api.http.get("/runs/kda-best/best", params={"format": "json"})).json()
    assert body["source"] == BEST_SOURCE
    assert body["report"] == {"status": "ok", "speedup": 1.8}
    assert body["attempt"]["is_best"] is True and body["attempt"]["iteration"] == 2


async def test_best_before_any_success_is_404(api):
    seed_run(api, "kda-new")
    response = await api.http.get("/runs/kda-new/best")
    assert response.status_code == 404
    assert response.json() == {"detail": "run kda-new has no best kernel yet"}


@pytest.mark.parametrize(
    "method,path,body",
    [
        ("GET", "/runs/ghost", None),
        ("GET", "/runs/ghost/attempts", None),
        ("GET", "/runs/ghost/best", None),
        ("POST", "/runs/ghost/pause", None),
        ("POST", "/runs/ghost/resume", None),
        ("POST", "/runs/ghost/stop", None),
        ("PATCH", "/runs/ghost/goal", {"target": 3.0}),
        ("POST", "/runs/ghost/hints", {"hint": "try BT=64"}),
    ],
)
async def test_unknown_run_is_404(api, method, path, body):
    response = await api.http.request(method, path, json=body)
    assert response.status_code == 404
    assert response.json() == {"detail": "run ghost not found"}


async def test_problems_have_shapes_and_baselines(api):
    body = (await api.http.get("/problems")).json()
    names = [p["name"] for p in body["data"]]
    assert names == ["kda", "kda-general", "kda-varlen", "mla-decode", "mla-decode-paged"] and body["count"] == 5
    mla = body["data"][3]
    assert mla["baselines"] == "kernels.mla.baseline:baselines"
    assert mla["shapes"]["cpu"][0] == [1, 4, 63]
    assert all(shape["flops"] > 0 and shape["bytes"] > 0 for shape in mla["bench"])
