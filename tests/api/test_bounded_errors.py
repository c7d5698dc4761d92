"""A 422 never fails on what it echoes and stays small, and validation cannot block the server:
an authenticated 1 MB body with 60,000 unknown keys used to take seconds of the event loop (one
error per key, each echoing its value: a 6 MB answer) while /healthz stalled."""

from __future__ import annotations

import asyncio
import json
import time

from fastapi.exceptions import RequestValidationError

from api.error_echo import MAX_ERRORS
from api.errors import invalid, validation_error
from api.request_checks import MAX_KEYS


async def test_the_422_handler_cleans_cuts_and_counts_what_it_echoes():
    hostile = [
        invalid(["body", "hint"], "refused \ud800", "\ud800" * 10),
        invalid(["body", "\udfff"], "x" * 50_000, {"k": float("nan"), "deep": [[[[["x" * 10_000]]]]]}),
        {"type": "value_error", "loc": ("body",), "msg": "m", "input": b"\xff\xfe", "ctx": {"error": ValueError("v")}},
        *[invalid(["body", i], "many", i) for i in range(1000)],
    ]
    response = await validation_error(None, RequestValidationError(hostile))
    assert response.status_code == 422
    assert len(response.body) < 20_000, len(response.body)
    detail = json.loads(response.body.decode("utf-8"))["detail"]
    assert len(detail) == MAX_ERRORS + 1
    assert detail[0]["input"] == "\ufffd" * 10 and detail[0]["msg"] == "refused \ufffd"
    assert detail[1]["loc"] == ["body", "\ufffd"] and detail[1]["input"]["k"] == "nan"
    assert detail[1]["msg"].endswith("… (50000 characters)")
    assert detail[2]["ctx"] == {"error": "v"}
    assert detail[-1]["type"] == "too_many_errors" and "983 more errors" in detail[-1]["msg"]


async def test_a_hint_refused_by_its_check_echoes_safely(api):
    run_id = (await api.http.post("/runs", json={"problem": "kda"})).json()["id"]
    response = await api.http.post(f"/runs/{run_id}/hints", json={"hint": "chunk=" + "9" * 1500})
    assert response.status_code == 422, response.text
    assert len(response.json()["detail"][0]["input"]) < 300


async def test_an_object_with_60000_unknown_keys_gets_a_small_422_while_healthz_answers(api, extra_api):
    settings = api.settings.model_copy(update={"max_body_bytes": 2_000_000})

    async def client_factory():
        return api.client

    http = await extra_api(settings, client_factory, allow_problem_paths=True)
    body = json.dumps({"problem": "kda", **{f"unknown_key_{i:05d}": 1 for i in range(60_000)}})
    assert len(body) > 1_000_000
    health_waits: list[float] = []
    done = asyncio.Event()

    async def watch_health() -> None:
        while not done.is_set():
            started = time.monotonic()
            assert (await http.get("/healthz")).status_code == 200
            health_waits.append(time.monotonic() - started)

    watcher = asyncio.create_task(watch_health())
    await asyncio.sleep(0.1)
    started = time.monotonic()
    response = await http.post("/runs", content=body, headers={"Content-Type": "application/json"})
    took = time.monotonic() - started
    done.set()
    await watcher
    assert response.status_code == 422
    assert len(response.content) < 2_000, len(response.content)
    [error] = response.json()["detail"]
    assert error["loc"] == ["body"]
    assert f"takes at most {MAX_KEYS} keys, this one has 60001" in error["msg"]
    # Generous bounds for a loaded 2-core machine; before, the answer took 4-6.5 s and health stalled 5 s.
    assert took < 3.0 and max(health_waits) < 3.0, (took, health_waits)
    nested = await http.post("/runs", json={"problem": "kda", "goal": {f"g{i}": 1 for i in range(5000)}})
    assert nested.status_code == 422 and nested.json()["detail"][0]["loc"] == ["body", "goal"]


async def test_a_body_that_is_not_utf8_is_a_400(api):
    text = json.dumps({"problem": "kda"})
    for encoded in (text.encode("utf-16"), text.encode("utf-16-le"), text.encode("utf-32"), b'{"problem": "k\xffda"}'):
        response = await api.http.post("/runs", content=encoded, headers={"Content-Type": "application/json"})
        assert response.status_code == 400, (encoded[:8], response.text)
        assert "the request body is not UTF-8 JSON" in response.json()["detail"]
    assert (await api.http.get("/runs")).json()["count"] == 0
    with_bom = await api.http.post("/runs", content=text.encode("utf-8-sig"), headers={"Content-Type": "application/json"})
    assert with_bom.status_code == 201, with_bom.text
