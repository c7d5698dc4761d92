"""POST /runs refuses what could not work, with what to do (issue 13, items 1 and 7): an LLM run
no CPU worker has an endpoint for, and a run without gpu_arch while no evaluator polls (it is
never pinned to a guessed architecture)."""

from __future__ import annotations

import asyncio
import uuid

from tests.fakes.openai_server import FakeOpenAIServer

from temporalio import activity
from temporalio.worker import Worker

from marathon.settings import LLM_CAPABILITY


@activity.defn(name="propose")
async def propose_stand_in() -> None:
    """Never called: it makes the stand-in CPU worker poll the activity queue, as a real one does."""


def _cpu_worker(api, identity: str) -> Worker:
    return Worker(api.client, task_queue=api.task_queue, activities=[propose_stand_in], identity=identity)


async def test_llm_run_refused_when_no_worker_polls_at_all(api):
    response = await api.http.post("/runs", json={"problem": "kda", "proposer": {"kind": "llm"}})
    assert response.status_code == 409, response.text
    detail = response.json()["detail"]
    assert f"no CPU worker polls task queue {api.task_queue}" in detail
    for name in ("MARATHON_LLM_BASE_URL", "MARATHON_LLM_MODEL", "MARATHON_LLM_API_KEY", "proposer.base_url"):
        assert name in detail


async def test_llm_run_refused_when_no_polling_worker_has_an_endpoint(api):
    async with _cpu_worker(api, f"{uuid.uuid4().hex[:6]}@test"):
        response = await api.http.post("/runs", json={"problem": "kda", "proposer": {"kind": "llm"}})
    assert response.status_code == 409, response.text
    detail = response.json()["detail"]
    assert "none of the 1 CPU worker(s) polling" in detail and "has an LLM endpoint" in detail
    assert "MARATHON_LLM_BASE_URL" in detail


async def test_llm_run_starts_when_a_worker_offers_it_or_the_request_names_an_endpoint(api):
    with FakeOpenAIServer() as llm:
        body = {"problem": "kda", "proposer": {"kind": "llm", "base_url": llm.base_url}}
        assert (await api.http.post("/runs", json=body)).status_code == 201
        # The probe asked the endpoint once, and took none of its scripted answers.
        assert [(r.method, r.path) for r in llm.requests] == [("GET", "/v1/models")]
    async with _cpu_worker(api, f"{uuid.uuid4().hex[:6]}@test {LLM_CAPABILITY}"):
        response = await api.http.post("/runs", json={"problem": "kda", "proposer": {"kind": "llm"}})
    assert response.status_code == 201, response.text


async def test_a_run_without_arch_waits_then_is_refused_while_no_evaluator_polls(bare_api):
    api = bare_api
    response = await api.http.post("/runs", json={"problem": "kda"})
    assert response.status_code == 503, response.text
    detail = response.json()["detail"]
    assert "no evaluation worker polls" in detail and "gpu_arch" in detail and "waited 1 s" in detail
    assert (await api.http.get("/runs")).json()["count"] == 0  # nothing half-started


async def test_a_run_without_arch_goes_where_an_evaluator_polls(api):
    response = await api.http.post("/runs", json={"problem": "kda"})
    assert response.status_code == 201, response.text
    assert response.json()["gpu_arch"] == "cpu"


async def test_a_run_pinned_to_a_queue_nobody_polls_says_so(api):
    response = await api.http.post("/runs", json={"problem": "kda", "gpu_arch": "sm90"})
    assert response.status_code == 201, response.text
    run = (await api.http.get(f"/runs/{response.json()['id']}")).json()
    queue = f"{api.settings.gpu_task_queue_prefix}sm90"
    assert run["status"] == "running"
    assert run["waiting_for"].startswith(f"no evaluation worker polls task queue {queue}: start one on a sm90 machine")


async def test_a_run_on_a_polled_queue_waits_for_nothing(api):
    response = await api.http.post("/runs", json={"problem": "kda"})
    run = (await api.http.get(f"/runs/{response.json()['id']}")).json()
    assert run["waiting_for"] == ""


async def test_a_run_without_any_worker_says_both(bare_api):
    api = bare_api
    response = await api.http.post("/runs", json={"problem": "kda", "gpu_arch": "cpu"})
    run = (await api.http.get(f"/runs/{response.json()['id']}")).json()
    assert f"no CPU worker polls task queue {api.task_queue}" in run["waiting_for"]
    assert f"no evaluation worker polls task queue {api.settings.gpu_task_queue_prefix}cpu" in run["waiting_for"]


async def test_healthz_says_which_workers_are_not_polling_yet(bare_api):
    health = (await bare_api.anonymous.get("/healthz")).json()
    assert health["status"] == "ok" and health["ready"] is False
    assert health["workers"] == {bare_api.task_queue: "no worker polls yet"}
    assert any(f"no CPU worker polls task queue {bare_api.task_queue}" in line for line in health["not_ready"])
    assert any("no evaluation worker polls" in line for line in health["not_ready"])


async def test_healthz_is_ready_when_cpu_and_evaluation_workers_poll(api):
    async with _cpu_worker(api, f"{uuid.uuid4().hex[:6]}@test"):
        for _ in range(50):
            health = (await api.anonymous.get("/healthz")).json()
            if health["ready"]:
                break
            await asyncio.sleep(0.2)
    assert health["ready"] is True and health["not_ready"] == []
    prefix = api.settings.gpu_task_queue_prefix
    assert health["workers"] == {api.task_queue: "polling", f"{prefix}cpu": "polling"}


async def test_an_llm_run_whose_endpoint_cannot_be_reached_is_refused_at_once(api):
    """Nothing listens on port 9 (discard): the run would spend minutes of retries per iteration."""
    body = {"problem": "kda", "proposer": {"kind": "llm", "base_url": "http://127.0.0.1:9/v1"}}
    response = await api.http.post("/runs", json=body)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "proposer", "base_url"]
    assert error["msg"].startswith("run not started: the LLM endpoint http://127.0.0.1:9/v1 cannot be reached")
    assert "correct proposer.base_url" in error["msg"]
    assert (await api.http.get("/runs")).json()["count"] == 0
