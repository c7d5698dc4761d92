"""Auth, body limits, malformed requests, health and the OpenAPI document."""

from __future__ import annotations

from sqlalchemy import select

from api.deps import INVALID_TOKEN, MISSING_TOKEN
from store.models import ApiToken

MISSING = "missing bearer token: send the header 'Authorization: Bearer <token>' (marathon up writes the token to <home>/api-token)"


async def test_missing_token_is_401_with_instructions(api):
    response = await api.anonymous.get("/runs")
    assert response.status_code == 401
    assert response.json() == {"detail": MISSING}
    assert MISSING_TOKEN == MISSING
    assert response.headers["www-authenticate"] == "Bearer"


async def test_wrong_token_is_401(api):
    for path in ("/runs", "/problems", "/runs/x/attempts"):
        response = await api.anonymous.get(path, headers={"Authorization": f"Bearer {api.token}x"})
        assert response.status_code == 401, path
        assert response.json() == {"detail": "invalid API token"}
    assert INVALID_TOKEN == "invalid API token"


async def test_actions_need_a_token_too(api):
    response = await api.anonymous.post("/runs", json={"problem": "kda"})
    assert response.status_code == 401
    response = await api.anonymous.post("/runs/some-run/stop")
    assert response.status_code == 401


async def test_health_needs_no_token_and_reports_dependencies(api):
    response = await api.anonymous.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "temporal": "ok"}


async def test_tokens_are_hashed_at_rest(api):
    with api.db() as session:
        hashes = session.scalars(select(ApiToken.token_hash)).all()
    assert len(hashes) == 1 and len(hashes[0]) == 64
    assert api.token not in hashes[0]


async def test_body_over_the_limit_is_413(api):
    response = await api.http.post(
        "/runs", content=b"{" + b" " * 30_000 + b"}", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json() == {"detail": "request body exceeds the limit of 20000 bytes"}


async def test_chunked_body_over_the_limit_is_413(api):
    async def chunks():
        for _ in range(30):
            yield b" " * 1000

    response = await api.http.post("/runs", content=chunks(), headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert response.json() == {"detail": "request body exceeds the limit of 20000 bytes"}


async def test_malformed_json_is_422_with_the_place(api):
    response = await api.http.post("/runs", content=b'{"problem": "kda",', headers={"Content-Type": "application/json"})
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["type"] == "json_invalid"
    assert error["msg"] == "malformed JSON body: Expecting property name enclosed in double quotes (at character 18)"


async def test_wrong_types_are_422(api):
    response = await api.http.post("/runs", json={"problem": "kda", "budget": {"iterations": "many"}})
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "budget", "iterations"]
    assert error["msg"] == "Input should be a valid integer, unable to parse string as an integer"


async def test_unknown_fields_are_422(api):
    response = await api.http.post("/runs", json={"problem": "kda", "budgett": {}})
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "budgett"] and error["msg"] == "Extra inputs are not permitted"


async def test_openapi_and_docs_are_served(api):
    schema = (await api.anonymous.get("/openapi.json")).json()
    assert {
        "/runs",
        "/runs/{run_id}",
        "/runs/{run_id}/attempts",
        "/runs/{run_id}/best",
        "/runs/{run_id}/goal",
        "/runs/{run_id}/hints",
        "/runs/{run_id}/pause",
        "/runs/{run_id}/resume",
        "/runs/{run_id}/stop",
        "/problems",
        "/healthz",
    } <= set(schema["paths"])
    assert (await api.anonymous.get("/docs")).status_code == 200


async def test_non_finite_numbers_are_422_not_500(api):
    body = b'{"problem": "kda", "goal": {"target": NaN}, "budget": {"hours": Infinity}}'
    response = await api.http.post("/runs", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 422
    errors = {tuple(e["loc"]): (e["msg"], e["input"]) for e in response.json()["detail"]}
    assert errors[("body", "goal", "target")] == ("Input should be a finite number", "nan")
    assert errors[("body", "budget", "hours")] == ("Input should be a finite number", "inf")


async def test_nul_bytes_never_reach_the_database(api):
    response = await api.http.get("/runs/bad%00id")
    assert response.status_code == 404
    assert response.json() == {"detail": "run bad\x00id not found"}
    assert (await api.http.get("/runs/bad%00id/attempts")).status_code == 404
    response = await api.http.get("/runs", params={"problem": "kda\x00"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "problem"]


async def test_method_not_allowed_names_every_method(api):
    response = await api.http.request("OPTIONS", "/runs")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, POST"
    response = await api.http.delete("/runs/some-run")
    assert response.status_code == 405 and response.headers["allow"] == "GET"
