"""The API in front of the real loop: POST /runs starts OptimizeKernelWorkflow on a real CPU
worker whose record activities write this test's database; proposals and evaluations are
scripted fakes (same activity names), so a 3-iteration run finishes in seconds."""

from __future__ import annotations

import asyncio

from temporalio import activity

from activities.compact import Compactor
from activities.record import Recorder
from api.temporal import TemporalGateway
from marathon.local_loop import local_loop
from marathon.workers import llm_endpoint
from store.artifacts import put_text
from store.db import session_scope
from workflows.types import Candidate, EvaluateInput, EvaluateResult, ProposeInput, ProposeResult


def candidate_source(iteration: int, index: int) -> str:
    return f"def kernel(q, kv, scale):\n    # iteration {iteration}, candidate {index}\n    return q\n"


def scripted_speedup(iteration: int, index: int) -> float:
    return 1.0 + 0.1 * iteration + 0.05 * index


class ScriptedLoop:
    def __init__(self, database_url: str) -> None:
        self.database_url = database_url

    @activity.defn(name="propose")
    async def propose(self, input: ProposeInput) -> ProposeResult:
        candidates = []
        for index in range(input.count):
            with session_scope(self.database_url) as session:
                sha = put_text(session, candidate_source(input.iteration, index))
            candidates.append(Candidate(index=index, source_sha=sha, strategy=f"scripted-{index}"))
        return ProposeResult(candidates=candidates)

    @activity.defn(name="evaluate")
    async def evaluate(self, input: EvaluateInput) -> EvaluateResult:
        return EvaluateResult(
            status="ok",
            speedup=scripted_speedup(input.iteration, input.index),
            timing_kind="interpreter",
        )


async def wait_for_evaluator(api, queue: str) -> None:
    """Pollers show up in Temporal a moment after the worker starts."""

    async def factory():
        return api.client

    gateway = TemporalGateway(api.settings, factory)
    for _ in range(100):
        if await gateway.evaluation_arch() == "cpu":
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the evaluator on {queue} never showed up as a poller")


async def test_a_run_through_the_api_completes_and_reads_back(bare_api):
    api = bare_api
    url = api.settings.resolved_database_url
    loop = ScriptedLoop(url)
    recorder = Recorder(url)
    evaluate_queue = f"{api.settings.gpu_task_queue_prefix}cpu"
    async with local_loop(
        api.client,
        api.settings,
        task_queue=api.task_queue,
        evaluate_queue=evaluate_queue,
        cpu_activities=[loop.propose, Compactor(llm_endpoint(api.settings)).compact, recorder.record, recorder.record_run],
        evaluate_activities=[loop.evaluate],
    ):
        await wait_for_evaluator(api, evaluate_queue)
        body = {
            "problem": "mla-decode",
            "goal": {"speedup": 100},
            "budget": {"iterations": 3},
            "candidates_per_iteration": 2,
        }
        response = await api.http.post("/runs", json=body)
        assert response.status_code == 201, response.text
        created = response.json()
        assert created["gpu_arch"] == "cpu"
        run_id = created["id"]
        await asyncio.wait_for(api.client.get_workflow_handle(run_id).result(), timeout=120)

        run = (await api.http.get(f"/runs/{run_id}")).json()
        assert run["status"] == "completed" and run["stop_reason"] == "budget_iterations"
        assert run["iteration"] == 3
        assert run["best_speedup"] == scripted_speedup(3, 1)
        # The run is over, so no query answers: what it used comes from the store.
        assert run["live"] is False and run["budget_used"]["iterations"] == 3
        assert run["budget_used"]["hours"] > 0 and run["budget_used"]["gpu_seconds"] >= 0

        attempts = (await api.http.get(f"/runs/{run_id}/attempts", params={"limit": 100})).json()
        assert attempts["count"] == 6
        assert [(a["iteration"], a["index"]) for a in attempts["data"]] == [(i, k) for i in (1, 2, 3) for k in (0, 1)]
        assert [a["speedup"] for a in attempts["data"]] == [scripted_speedup(i, k) for i in (1, 2, 3) for k in (0, 1)]

        best = await api.http.get(f"/runs/{run_id}/best")
        assert best.status_code == 200 and best.text == candidate_source(3, 1)

        page = await api.http.get(f"/runs/{run_id}/page")
        assert page.status_code == 200
        assert page.text.count('<circle class="attempt"') == 6
        assert "iteration 3, candidate 1" in page.text

        response = await api.http.post(f"/runs/{run_id}/pause")
        assert response.status_code == 409
        assert response.json() == {"detail": f"run {run_id} is completed; it can no longer be paused"}
