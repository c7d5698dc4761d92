"""Steering is data: every pause, resume, stop, goal change and hint is in the store with its
time and served at GET /runs/{id}/steering, also after the run ends. Hints naming knobs are
checked against the problem's search space (GET /problems lists it). An attempt's LLM prompt
and reply are served at GET /runs/{id}/attempts/{n}/llm and linked from the run page."""

from __future__ import annotations

import json

from tests.fakes.openai_server import FakeOpenAIServer
from datetime import datetime

from store import repository
from store.artifacts import put_text
from kernels.kda import space as kda_space


async def start(api, **extra) -> str:
    response = await api.http.post("/runs", json={"problem": "kda", "goal": {"speedup": 2.0}, **extra})
    assert response.status_code == 201, response.text
    return response.json()["id"]


async def test_problems_list_their_knobs(api):
    problems = {p["name"]: p for p in (await api.http.get("/problems")).json()["data"]}
    knobs = {k["name"]: k for k in problems["kda"]["knobs"]}
    assert list(knobs) == list(kda_space.SPACE)
    assert knobs["chunk"]["values"] == [16, 32, 64] and knobs["chunk"]["default"] == kda_space.DEFAULT["chunk"]
    assert "chunk size" in knobs["chunk"]["description"]
    assert all(k["description"] for k in problems["mla-decode"]["knobs"])


async def test_every_steering_request_is_kept_after_the_run_ends(api):
    run_id = await start(api)
    assert (await api.http.post(f"/runs/{run_id}/pause")).status_code == 202
    assert (await api.http.post(f"/runs/{run_id}/resume")).status_code == 202
    assert (await api.http.patch(f"/runs/{run_id}/goal", json={"target": 3.0})).status_code == 200
    assert (await api.http.post(f"/runs/{run_id}/hints", json={"hint": "chunk=64"})).status_code == 202
    assert (await api.http.post(f"/runs/{run_id}/stop")).status_code == 202
    await api.client.get_workflow_handle(run_id).result()
    assert (await api.http.get(f"/runs/{run_id}")).json()["status"] == "stopped"

    body = (await api.http.get(f"/runs/{run_id}/steering")).json()
    assert body["count"] == 5
    events = body["data"]
    assert [e["kind"] for e in events] == ["pause", "resume", "goal", "hint", "stop"]
    times = [datetime.fromisoformat(e["created_at"]) for e in events]
    assert times == sorted(times) and all(t.tzinfo is not None for t in times)
    assert events[2]["detail"]["goal"]["target"] == 3.0 and events[2]["detail"]["previous"]["target"] == 2.0
    assert events[3]["detail"] == {"hint": "chunk=64", "kind": "knobs", "knobs": {"chunk": 64}, "read_by": "search"}
    # The run page lists them too, in words.
    page = (await api.http.get(f"/runs/{run_id}/page")).text
    assert '<ul id="steering">' in page
    assert "hint: chunk=64 (read by the search proposer)" in page and "goal: 2.0 -&gt; 3.0 (speedup)" in page
    # Refused requests leave no trace: the run is over.
    assert (await api.http.post(f"/runs/{run_id}/pause")).status_code == 409
    assert (await api.http.get(f"/runs/{run_id}/steering")).json()["count"] == 5


async def test_steering_of_an_unknown_run_is_404(api):
    assert (await api.http.get("/runs/ghost/steering")).status_code == 404


async def test_hints_naming_no_knob_or_a_bad_value_are_422_with_the_valid_ones(api):
    run_id = await start(api)
    response = await api.http.post(f"/runs/{run_id}/hints", json={"hint": "try BT=64"})
    assert response.status_code == 422
    message = response.json()["detail"][0]["msg"]
    assert message.startswith("'BT' is not a knob; the knobs are: prep_variant (flat, split, subchunk); chunk (16, 32, 64);")
    response = await api.http.post(f"/runs/{run_id}/hints", json={"hint": "chunk=48"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["msg"] == "chunk=48 is not allowed: chunk takes one of 16, 32, 64"
    # Nothing refused reached the log (or the workflow).
    assert (await api.http.get(f"/runs/{run_id}/steering")).json()["count"] == 0


async def test_free_text_is_kept_and_the_answer_says_who_reads_it(api):
    run_id = await start(api)
    response = await api.http.post(f"/runs/{run_id}/hints", json={"hint": "try a larger chunk size"})
    assert response.status_code == 202
    body = response.json()
    assert body["kind"] == "text" and body["proposer"] == "search" and body["read_by"] is None
    assert "reads only knob settings" in body["note"]
    # An endpoint in the request: no CPU worker here advertises one (POST /runs refuses an llm run without).
    with FakeOpenAIServer() as llm:
        llm_run = await start(api, proposer={"kind": "llm", "base_url": llm.base_url})
    body = (await api.http.post(f"/runs/{llm_run}/hints", json={"hint": "try a larger chunk size"})).json()
    assert body["read_by"] == "llm" and body["proposer"] == "llm"
    events = (await api.http.get(f"/runs/{run_id}/steering")).json()["data"]
    assert [e["detail"]["hint"] for e in events] == ["try a larger chunk size"]


async def test_an_attempts_llm_exchange_is_served_and_linked_from_the_page(api):
    run_id = await start(api)
    exchange = {"model": "m", "endpoint": "http://llm/v1", "messages": [{"role": "user", "content": "write <b>it</b>"}],
                "reply": "Strategy: x", "tokens": 12, "clipped": False}
    with api.db() as session:
        sha = put_text(session, json.dumps(exchange))
        written, _ = repository.record_attempt(
            session, run_id=run_id, iteration=1, index=0, strategy="x", knobs=None, source_sha=sha, status="ok",
            message="", speedup=1.1, roofline=None, timing_kind="interpreter", report_sha=None, is_best=False,
            gpu_seconds=0.0, llm_sha=sha,
        )
        plain, _ = repository.record_attempt(
            session, run_id=run_id, iteration=1, index=1, strategy="y", knobs=None, source_sha=sha, status="ok",
            message="", speedup=1.0, roofline=None, timing_kind="interpreter", report_sha=None, is_best=False,
            gpu_seconds=0.0,
        )
        written_id, plain_id = written.id, plain.id
    attempts = (await api.http.get(f"/runs/{run_id}/attempts")).json()["data"]
    assert attempts[0]["llm_sha"] == sha and attempts[0]["llm_url"] == f"/runs/{run_id}/attempts/{written_id}/llm"
    assert attempts[1]["llm_url"] is None
    body = (await api.http.get(attempts[0]["llm_url"])).json()
    assert body["transcript"] == exchange and body["iteration"] == 1 and body["index"] == 0
    text = await api.http.get(attempts[0]["llm_url"], params={"format": "text"})
    assert text.headers["content-type"].startswith("text/plain") and "===== user =====\nwrite <b>it</b>" in text.text
    assert (await api.http.get(f"/runs/{run_id}/attempts/{plain_id}/llm")).status_code == 404
    assert (await api.http.get(f"/runs/other-run/attempts/{written_id}/llm")).status_code == 404
    assert (await api.anonymous.get(attempts[0]["llm_url"])).status_code == 401
    page = (await api.http.get(f"/runs/{run_id}/page")).text
    assert f'href="/runs/{run_id}/attempts/{written_id}/llm?format=text"' in page
