"""POST /runs: validation with exact messages, the store row and the workflow start together."""

from __future__ import annotations

import socket

import pytest
from temporalio.client import Client

from store import repository
from workflows import search_attributes as attrs


async def test_create_run_starts_the_workflow_and_stores_the_row(api):
    body = {
        "problem": "kda",
        "goal": {"speedup": 3.0},
        "budget": {"iterations": 200, "hours": 24},
        "proposer": {"kind": "search"},
        "candidates_per_iteration": 4,
    }
    response = await api.http.post("/runs", json=body)
    assert response.status_code == 201, response.text
    created = response.json()
    run_id = created["id"]
    assert run_id.startswith("kda-")
    assert created["status"] == "running"
    assert created["run_page_url"] == f"{api.base_url}/runs/{run_id}/page"
    assert created["temporal_url"] == f"http://temporal-ui.test:8233/namespaces/default/workflows/{run_id}"

    handle = api.client.get_workflow_handle(run_id)
    description = await handle.describe()
    assert description.workflow_type == "OptimizeKernelWorkflow"
    assert description.task_queue == api.task_queue
    assert description.typed_search_attributes.get(attrs.PROBLEM) == "kda"
    assert description.typed_search_attributes.get(attrs.GOAL) == "3x geomean speedup over the baseline"

    with api.db() as session:
        run = repository.get_run(session, run_id)
        assert run.goal == {"objective": "speedup", "target": 3.0, "tolerance": 0.0, "intent": ""}
        assert run.budget["iterations"] == 200 and run.candidates_per_iteration == 4
        assert run.workflow_id == run_id


async def test_defaults_fill_everything_but_the_problem(api):
    response = await api.http.post("/runs", json={"problem": "mla-decode"})
    assert response.status_code == 201, response.text
    run = (await api.http.get(f"/runs/{response.json()['id']}")).json()
    assert run["goal"]["target"] == 2.0 and run["budget"]["iterations"] == 50
    assert run["proposer"]["kind"] == "search" and run["candidates_per_iteration"] == 4


async def test_unknown_problem_lists_the_known_ones_and_creates_nothing(api):
    response = await api.http.post("/runs", json={"problem": "gemm"})
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert (error["type"], error["loc"], error["input"]) == ("value_error", ["body", "problem"], "gemm")
    assert error["msg"].startswith("unknown problem 'gemm'; known problems: kda, kda-general, kda-varlen, mla-decode, mla-decode-paged. ")
    assert "once a CPU worker with that package installed has started" in error["msg"]
    assert (await api.http.get("/runs")).json() == {"data": [], "count": 0}


async def test_impossible_goal_budget_and_proposer_say_why(api):
    body = {
        "problem": "kda",
        "goal": {"objective": "roofline", "target": 1.5},
        "budget": {"iterations": 0, "hours": 1000},
        "proposer": {"kind": "oracle"},
    }
    response = await api.http.post("/runs", json=body)
    assert response.status_code == 422
    messages = [(e["loc"], e["msg"]) for e in response.json()["detail"]]
    assert messages == [
        (["body", "goal"], "a roofline fraction cannot exceed 1, got target 1.5"),
        (["body", "budget"], "budget iterations must be between 1 and 100000, got 0"),
        (["body", "budget"], "budget hours must be > 0 and at most 336 (two weeks), got 1000.0"),
        (["body", "proposer"], "proposer kind must be one of search, llm, agent, got 'oracle'"),
    ]
    assert (await api.http.get("/runs")).json()["count"] == 0


async def test_object_path_problems_are_refused_unless_enabled(api, temporal_env, extra_api):
    async def factory() -> Client:
        return temporal_env.client

    http = await extra_api(api.settings.model_copy(), factory)
    response = await http.post("/runs", json={"problem": "os:path"})
    assert response.status_code == 422
    assert (
        response.json()["detail"][0]["msg"]
        == "problem 'os:path' is an object path; this API only runs registered problems"
    )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_temporal_down_gives_503_and_leaves_no_row(api, extra_api):
    settings = api.settings.model_copy(update={"temporal_address": f"127.0.0.1:{_closed_port()}"})
    http = await extra_api(settings, None)
    response = await http.post("/runs", json={"problem": "kda"})
    listed = (await http.get("/runs")).json()
    assert response.status_code == 503
    detail = response.json()["detail"]
    assert detail.startswith(f"run not started: Temporal at {settings.temporal_address} is not reachable: ")
    assert listed == {"data": [], "count": 0}


async def test_a_refused_start_removes_the_row(api, temporal_env, extra_api):
    """A namespace that does not exist: Temporal answers, but refuses the start."""
    settings = api.settings.model_copy(update={"temporal_namespace": "no-such-namespace"})

    async def factory() -> Client:
        return await Client.connect(
            temporal_env.client.service_client.config.target_host, namespace="no-such-namespace"
        )

    http = await extra_api(settings, factory)
    # gpu_arch given: nothing polls in that namespace, and the start itself must be refused.
    response = await http.post("/runs", json={"problem": "kda", "gpu_arch": "cpu"})
    listed = (await http.get("/runs")).json()
    assert response.status_code == 503
    assert response.json()["detail"].startswith("run not started: Temporal refused to start the workflow: ")
    assert "no-such-namespace" in response.json()["detail"]
    assert listed["count"] == 0


@pytest.mark.parametrize("field", ["candidates_per_iteration"])
async def test_candidate_count_is_bounded(api, field):
    response = await api.http.post("/runs", json={"problem": "kda", field: 0})
    assert response.status_code == 422
    assert response.json()["detail"][0]["msg"] == "Input should be greater than or equal to 1"
