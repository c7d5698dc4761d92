"""The OpenAPI schema is the contract: what a route returns is declared, auth is declared where it
is required, the goal shorthand's rule is stated (and refused in words), datetimes carry their
offset, the problem list follows registration, and integers stay within what JavaScript reads."""

from __future__ import annotations

from datetime import datetime

from api.schemas import SAFE_INTEGER_MAX
from kernels.describe import describe
from kernels.registry import get_problem
from store import repository

TOY = "toy-registered"


async def _strict_api(api, extra_api):
    """An API as deployed: it runs registered problems only (the test API also takes object paths)."""

    async def client_factory():
        return api.client

    return await extra_api(api.settings, client_factory)


async def test_the_problem_list_follows_registration_and_times_carry_an_offset(api, extra_api):
    with api.db() as session:
        repository.register_problem(session, name=TOY, description={**describe(get_problem("kda")), "name": TOY},
                                    source="tests", worker="1@node")
    http = await _strict_api(api, extra_api)
    schema = (await http.get("/openapi.json")).json()
    listed = schema["components"]["schemas"]["RunCreate"]["properties"]["problem"]["enum"]
    assert listed[:2] == ["kda", "kda-general"] and TOY in listed
    problems = {p["name"]: p for p in (await http.get("/problems")).json()["data"]}
    assert datetime.fromisoformat(problems[TOY]["registered_at"]).tzinfo is not None
    assert problems["kda"]["registered_at"] is None


async def test_routes_a_browser_opens_declare_their_auth_and_answers(api):
    schema = (await api.anonymous.get("/openapi.json")).json()
    page = schema["paths"]["/runs/{run_id}/page"]["get"]
    llm = schema["paths"]["/runs/{run_id}/attempts/{attempt_id}/llm"]["get"]
    for operation in (page, llm):
        assert {"HTTPBearer": []} in operation["security"] and {"APIKeyCookie": []} in operation["security"]
        assert {"401", "404"} <= set(operation["responses"])
    assert "text/html" in page["responses"]["401"]["content"]
    assert schema["components"]["securitySchemes"]["APIKeyCookie"] == {
        "type": "apiKey", "in": "cookie", "name": "marathon_token",
        "description": "The same token, as the run page's token form stores it",
    }
    anonymous = await api.anonymous.get("/runs/ghost/page")
    assert anonymous.status_code == 401
    assert (await api.http.get("/runs/ghost/page")).status_code == 404


async def test_the_goal_shorthand_rule_is_in_the_schema_and_refused_in_words(api):
    schema = (await api.anonymous.get("/openapi.json")).json()["components"]["schemas"]
    conflicts = schema["GoalIn"]["not"]["anyOf"]
    assert {"required": ["objective", "speedup"]} in conflicts and {"required": ["speedup", "roofline"]} in conflicts
    response = await api.http.post("/runs", json={"problem": "kda", "goal": {"speedup": 2.0, "objective": "speedup"}})
    assert response.status_code == 422
    message = response.json()["detail"][0]["msg"]
    assert "Extra inputs" not in message
    assert 'the goal shorthand {"speedup": x} stands for objective and target' in message and "objective" in message


async def test_unknown_from_run_is_a_documented_422(api):
    schema = (await api.anonymous.get("/openapi.json")).json()
    assert "an unknown from_run" in schema["paths"]["/runs"]["post"]["responses"]["422"]["description"]
    response = await api.http.post("/runs", json={"problem": "kda", "from_run": "ghost"})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "from_run"]


async def test_integers_stay_within_what_javascript_reads(api):
    schema = (await api.anonymous.get("/openapi.json")).json()
    components = schema["components"]["schemas"]
    assert components["ProposerIn"]["properties"]["seed"]["maximum"] == SAFE_INTEGER_MAX
    assert components["BudgetIn"]["properties"]["tokens"]["anyOf"][0]["maximum"] == SAFE_INTEGER_MAX
    llm = schema["paths"]["/runs/{run_id}/attempts/{attempt_id}/llm"]["get"]
    attempt_id = next(p for p in llm["parameters"] if p["name"] == "attempt_id")
    assert attempt_id["schema"]["maximum"] == SAFE_INTEGER_MAX
    for body in ({"proposer": {"seed": 2**60}}, {"budget": {"tokens": 2**53}}):
        response = await api.http.post("/runs", json={"problem": "kda", **body})
        assert response.status_code == 422, response.text
    assert (await api.http.get("/runs")).json()["count"] == 0


async def test_creating_a_run_links_to_the_routes_that_read_and_steer_it(api):
    schema = (await api.anonymous.get("/openapi.json")).json()
    links = schema["paths"]["/runs"]["post"]["responses"]["201"]["links"]
    assert {"read_run_runs__run_id__get", "update_goal_runs__run_id__goal_patch"} <= set(links)
    assert all(link["parameters"] == {"run_id": "$response.body#/id"} for link in links.values())


async def test_the_body_is_read_as_the_schema_types_it(api):
    """Found by the fuzzer: ``true`` was read as the number 1 and ``{"speedup": null}`` as no change."""
    for goal in ({"target": True}, {"speedup": "2"}, {"speedup": None}):
        response = await api.http.post("/runs", json={"problem": "kda", "goal": goal})
        assert response.status_code == 422, (goal, response.text)
    run_id = (await api.http.post("/runs", json={"problem": "kda", "budget": {"iterations": 20.0}})).json()["id"]
    assert (await api.http.get(f"/runs/{run_id}")).json()["budget"]["iterations"] == 20
    refused = await api.http.patch(f"/runs/{run_id}/goal", json={"speedup": None})
    assert refused.status_code == 422 and "needs a number x, got null" in refused.json()["detail"][0]["msg"]
