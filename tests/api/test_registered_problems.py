"""Problems from packages of their own: the API lists one, and accepts runs on it, once a CPU
worker that has its package has registered it (marathon/problem_registration.py), and not before,
even when the API's own process could import it."""

from __future__ import annotations

import pytest
from temporalio import activity
from temporalio.worker import Worker

from marathon.problem_registration import register_problems, registration_lines
from store import repository
from tests.problems.installed import install_here, uninstall_here

NAME = "rmsnorm-residual"


@activity.defn(name="standin_propose")
async def standin_propose() -> None:
    """Never called: it makes a stand-in CPU worker poll the CPU queue's activities."""


@pytest.fixture
def example_installed(tmp_path):
    added = install_here(tmp_path / "site")
    yield
    uninstall_here(added)


async def test_a_problem_no_worker_registered_is_refused_then_accepted_once_registered(api, example_installed):
    listed = [p["name"] for p in (await api.http.get("/problems")).json()["data"]]
    assert NAME not in listed
    refused = await api.http.post("/runs", json={"problem": NAME})
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["msg"].startswith(f"unknown problem {NAME!r}; known problems: kda, kda-general, kda-varlen, mla-decode, mla-decode-paged.")

    outcome = register_problems(api.settings.resolved_database_url, "4242@gone-node +llm")
    assert outcome.failed == {} and outcome.registered == ["kda", "kda-general", "kda-varlen", "mla-decode", "mla-decode-paged", NAME]

    body = (await api.http.get("/problems")).json()
    problems = {p["name"]: p for p in body["data"]}
    assert list(problems) == ["kda", "kda-general", "kda-varlen", "mla-decode", "mla-decode-paged", NAME] and body["count"] == 6
    mine = problems[NAME]
    assert mine["registered_by"] == "4242@gone-node +llm" and mine["registered_at"]
    assert problems["kda"]["registered_by"] is None
    assert mine["inputs"] == ["x", "residual", "weight"] and mine["dims"] == ["N", "D"]
    assert mine["shapes"]["cpu"] == [[3, 64], [5, 100], [2, 257]]
    assert mine["baselines"] == "marathon_rmsnorm.baseline:baselines"
    assert {k["name"]: k["default"] for k in mine["knobs"]} == {"block_d": 256, "num_warps": 4}
    assert [b["flops"] for b in mine["bench"]] == [5.0 * n * d for n, d in mine["shapes"]["bench"]]
    assert all(b["bytes"] == 2.0 * (3 * n * d + d) for b, (n, d) in zip(mine["bench"], mine["shapes"]["bench"]))

    # The worker that registered it does not poll: nobody may have the package now.
    refused = await api.http.post("/runs", json={"problem": NAME, "gpu_arch": "cpu"})
    assert refused.status_code == 409
    assert refused.json()["detail"] == (
        f"run not started: problem {NAME!r} was registered by CPU worker(s) 4242@gone-node +llm, none of which "
        f"polls task queue {api.task_queue} now (polling: none). Start a CPU worker that has its package "
        "installed (`marathon up`, or `marathon worker cpu`): it registers the problem when it starts"
    )

    # A CPU worker (its activities on the CPU queue, as the real one's propose) that registered it.
    identity = "77@cpu-node"
    async with Worker(api.client, task_queue=api.task_queue, activities=[standin_propose], identity=identity):
        register_problems(api.settings.resolved_database_url, identity)
        created = await api.http.post("/runs", json={"problem": NAME, "gpu_arch": "cpu"})
    assert created.status_code == 201, created.text
    assert created.json()["id"].startswith(NAME)
    with api.db() as session:
        assert repository.get_registered_problem(session, NAME).workers == ["4242@gone-node +llm", identity]


async def test_a_refusal_names_who_registered_what(api):
    with api.db() as session:
        repository.register_problem(session, name="softmax-mask", description={}, source="acme.softmax:PROBLEM",
                                    worker="77@gpu-box")
    response = await api.http.post("/runs", json={"problem": "gemm"})
    message = response.json()["detail"][0]["msg"]
    assert message.startswith("unknown problem 'gemm'; known problems: kda, kda-general, kda-varlen, mla-decode, mla-decode-paged (built in), "
                              "softmax-mask (registered by CPU worker 77@gpu-box). ")


async def test_an_entry_point_the_worker_refused_is_named_with_why_in_the_422(api, tmp_path):
    # The entry point's name differs from its problem's: the worker cannot register it.
    added = install_here(tmp_path / "misnamed", {"rms": "marathon_rmsnorm.definition:PROBLEM"}, "misnamed")
    try:
        outcome = register_problems(api.settings.resolved_database_url, "88@cpu-node")
    finally:
        uninstall_here(added)
    assert "rms" in outcome.failed and "rms" not in outcome.registered
    listed = [p["name"] for p in (await api.http.get("/problems")).json()["data"]]
    assert "rms" not in listed
    for asked in ("rms", "softmax"):
        response = await api.http.post("/runs", json={"problem": asked})
        assert response.status_code == 422
        message = response.json()["detail"][0]["msg"]
        assert ("Entry points found but refused: rms = marathon_rmsnorm.definition:PROBLEM (CPU worker 88@cpu-node): "
                "ValueError: entry point 'rms' of marathon.problems loads 'marathon_rmsnorm.definition:PROBLEM', "
                "whose name is 'rmsnorm-residual': the two must be the same") in message, message

    # `marathon up`'s banner says it too.
    lines = registration_lines(api.settings.resolved_database_url)
    assert any(line.startswith("  REFUSED      entry point rms = marathon_rmsnorm.definition:PROBLEM: ValueError: "
                               "entry point 'rms'") for line in lines), lines

    # Fixed (the entry point now carries the problem's name): the next start forgets the refusal.
    register_problems(api.settings.resolved_database_url, "89@cpu-node")
    with api.db() as session:
        assert repository.get_registered_problem(session, "rms") is None
