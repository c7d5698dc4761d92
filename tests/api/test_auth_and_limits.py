"""Auth, body limits, malformed requests, health and the OpenAPI document."""

from __future__ import annotations

import re
from html import escape

import pytest
from sqlalchemy import select

from api.deps import INVALID_TOKEN, MISSING_TOKEN, TOKEN_COOKIE
from api.main import create_app
from api.routes.pages import EMPTY_FORM_HINT, LOGIN_HINT, STALE_TOKEN_HINT
from marathon.settings import Settings
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


# Routes that answer without a token: liveness, and the docs (pages, their assets, the schema).
OPEN_PATHS = {"/healthz", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}
OPEN_PREFIXES = ("/docs-assets",)
# Opened in a browser: a 401 there is the HTML token form, not JSON.
HTML_PAGES = {"/runs/{run_id}/page", "/login"}
RUN_ID = "kda-0123456789ab"
WRONG_TOKEN = "mt_not-a-token-this-api-issued"


def _route_contexts(app):
    """Every route of ``app`` with its full path. FastAPI >= 0.16x keeps included routers as
    lazy branches in ``app.routes`` and flattens them with ``iter_route_contexts`` (what its
    OpenAPI generator uses); older versions list the routes in ``app.routes`` directly."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:
        return list(app.routes)
    return list(iter_route_contexts(app.routes))


def guarded_routes() -> list[tuple[str, str]]:
    """(method, path) for each route that must refuse a request without a valid token, read
    from the application itself so that a route added later is covered without editing this."""
    app = create_app(Settings(_env_file=None))
    found = set()
    for route in _route_contexts(app):
        path = route.path
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            continue
        for method in getattr(route, "methods", None) or ():
            if method != "HEAD":  # Starlette adds HEAD to GET routes; the GET case covers it.
                found.add((method, path))
    return sorted(found, key=lambda pair: (pair[1], pair[0]))


GUARDED = guarded_routes()


def test_the_enumeration_finds_the_routes():
    """A broken walk over the routes would make the parametrized test below pass vacuously."""
    assert {
        ("GET", "/problems"),
        ("GET", "/runs"),
        ("POST", "/runs"),
        ("GET", "/runs/{run_id}"),
        ("GET", "/runs/{run_id}/attempts"),
        ("GET", "/runs/{run_id}/best"),
        ("PATCH", "/runs/{run_id}/goal"),
        ("POST", "/runs/{run_id}/hints"),
        ("POST", "/runs/{run_id}/pause"),
        ("POST", "/runs/{run_id}/resume"),
        ("POST", "/runs/{run_id}/stop"),
        ("GET", "/runs/{run_id}/page"),
        ("POST", "/login"),
    } <= set(GUARDED)
    assert not [pair for pair in GUARDED if pair[1] in OPEN_PATHS]


def _assert_token_form(response, path: str, message: str) -> None:
    assert response.headers["content-type"].startswith("text/html")
    page = response.text
    assert f"<p>{escape(message)}</p>" in page
    assert '<form method="post" action="/login">' in page
    assert '<input type="password" name="token"' in page
    if path.endswith("/page"):
        # The form brings the browser back to the page it asked for.
        assert f'name="next" value="{path}"' in page


@pytest.mark.parametrize(("method", "route"), GUARDED, ids=[f"{m} {p}" for m, p in GUARDED])
async def test_every_route_refuses_a_missing_or_wrong_token(bare_api, method, route):
    path = re.sub(r"\{[^}]+\}", RUN_ID, route.replace("{attempt_id}", "1"))  # attempt ids are integers
    # The wrong token goes everywhere a token is read: the header (API clients), the cookie the
    # token form sets (the run page in a browser) and the form field itself (/login).
    wrong = {"headers": {"Authorization": f"Bearer {WRONG_TOKEN}", "Cookie": f"{TOKEN_COOKIE}={WRONG_TOKEN}"}}
    if route == "/login":
        wrong["data"] = {"token": WRONG_TOKEN, "next": f"/runs/{RUN_ID}/page"}
    missing = await bare_api.anonymous.request(method, path)
    refused = await bare_api.anonymous.request(method, path, **wrong)
    for case, response in (("no token", missing), ("wrong token", refused)):
        assert response.status_code == 401, f"{method} {path} with {case}: {response.status_code} {response.text[:300]}"
    if route == "/runs/{run_id}/page":
        # Both get the token form; the hint says whether no token came or a stale one did.
        _assert_token_form(missing, path, LOGIN_HINT)
        _assert_token_form(refused, path, STALE_TOKEN_HINT)
    elif route == "/login":
        # An empty form says nothing was given; a wrong token is "invalid API token".
        _assert_token_form(missing, path, EMPTY_FORM_HINT)
        _assert_token_form(refused, path, INVALID_TOKEN)
        assert TOKEN_COOKIE not in refused.cookies
    else:
        assert route not in HTML_PAGES
        assert missing.json() == {"detail": MISSING_TOKEN}
        assert refused.json() == {"detail": INVALID_TOKEN}
        assert missing.headers["www-authenticate"] == refused.headers["www-authenticate"] == "Bearer"


async def test_actions_need_a_token_too(api):
    response = await api.anonymous.post("/runs", json={"problem": "kda"})
    assert response.status_code == 401
    response = await api.anonymous.post("/runs/some-run/stop")
    assert response.status_code == 401


async def test_health_needs_no_token_and_reports_dependencies(api):
    response = await api.anonymous.get("/healthz")
    assert response.status_code == 200
    health = response.json()
    assert {key: health[key] for key in ("status", "database", "temporal")} == {
        "status": "ok", "database": "ok", "temporal": "ok"
    }


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
    # Request bodies are strict (api/schemas.py): a string is never read as a number, "2" included.
    assert error["msg"] == "Input should be a valid integer"
    response = await api.http.post("/runs", json={"problem": "kda", "budget": {"iterations": "20"}})
    assert response.status_code == 422 and response.json()["detail"][0]["type"] == "int_type"


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
