"""Text that cannot be stored or echoed never enters, and a row that holds it anyway cannot deny
the list, a run or its page to anyone.

JSON allows a lone surrogate (``"\\ud800"``), which Python decodes into a str UTF-8 cannot encode:
a run created with one used to answer 201 and then turn GET /runs, GET /runs/{id} and the run
page into 500s for every user, for good. The 422 that refuses it echoes the input and must not
fail on it either.
"""

from __future__ import annotations

import json
import typing

import pytest
from pydantic import BaseModel, ValidationError

from api import schemas
from api.request_checks import Checked
from store import repository

LONE = "\ud800"
ESCAPED = {"Content-Type": "application/json"}


def escaped(body: object) -> str:
    """JSON as a client writes it with ASCII escapes: a lone surrogate travels as ``\\ud800``."""
    return json.dumps(body)


def _string_fields(model: type[BaseModel]) -> list[str]:
    return [name for name, field in model.model_fields.items() if str in (field.annotation, *typing.get_args(field.annotation))]


def _request_models() -> list[type[BaseModel]]:
    return [
        value for value in vars(schemas).values()
        if isinstance(value, type) and issubclass(value, Checked) and value not in (Checked, schemas.Strict)
    ]


def test_every_string_field_of_every_request_model_refuses_a_lone_surrogate_and_a_nul():
    models = _request_models()
    assert {m.__name__ for m in models} >= {"RunCreate", "RunContinue", "GoalIn", "GoalUpdate", "HintCreate"}
    checked = 0
    for model in models:
        for name in _string_fields(model):
            base = {"problem": "kda"} if model is schemas.RunCreate and name != "problem" else {}
            for bad, words in ((f"a{LONE}b", "lone surrogate U+D800 at character 1"), ("a\x00b", "NUL character")):
                with pytest.raises(ValidationError) as refused:
                    model.model_validate({**base, name: bad})
                errors = refused.value.errors()
                assert [e["loc"] for e in errors] == [(name,)], (model.__name__, name, errors)
                assert words in errors[0]["msg"], errors[0]["msg"]
                checked += 1
    assert checked >= 2 * 10


@pytest.mark.parametrize(
    "body, where",
    [
        ({"problem": "kda", "goal": {"intent": LONE}}, ["body", "goal", "intent"]),
        ({"problem": LONE}, ["body", "problem"]),
        ({"problem": "kda", "from_run": LONE}, ["body", "from_run"]),
        ({"problem": "kda", "gpu_arch": LONE}, ["body", "gpu_arch"]),
        ({"problem": "kda", "proposer": {"model": LONE}}, ["body", "proposer", "model"]),
        ({"problem": "kda", "goal": {"intent": "x\x00"}}, ["body", "goal", "intent"]),
        ({"problem": "kda", LONE: 1}, ["body"]),
    ],
    ids=["intent", "problem", "from_run", "gpu_arch", "proposer-model", "nul-intent", "surrogate-key"],
)
async def test_a_run_with_unstorable_text_is_refused_with_an_encodable_422(api, body, where):
    response = await api.http.post("/runs", content=escaped(body), headers=ESCAPED)
    assert response.status_code == 422, response.text
    response.content.decode("utf-8")  # strict: the body itself is UTF-8
    error = response.json()["detail"][0]
    assert error["loc"] == where and ("lone surrogate" in error["msg"] or "NUL" in error["msg"]), error
    assert (await api.http.get("/runs")).json()["count"] == 0


async def test_steering_with_unstorable_text_is_refused_and_changes_nothing(api):
    created = await api.http.post("/runs", json={"problem": "kda", "goal": {"speedup": 2.0}})
    run_id = created.json()["id"]
    goal = await api.http.patch(f"/runs/{run_id}/goal", content=escaped({"intent": LONE}), headers=ESCAPED)
    hint = await api.http.post(f"/runs/{run_id}/hints", content=escaped({"hint": f"chunk=64 {LONE}"}), headers=ESCAPED)
    assert goal.status_code == 422 and "lone surrogate" in goal.json()["detail"][0]["msg"], goal.text
    assert hint.status_code == 422 and "lone surrogate" in hint.json()["detail"][0]["msg"], hint.text
    assert (await api.http.get(f"/runs/{run_id}/steering")).json()["count"] == 0
    run = await api.http.get(f"/runs/{run_id}")
    assert run.status_code == 200 and run.json()["goal"]["intent"] == ""
    page = await api.http.get(f"/runs/{run_id}/page")
    assert page.status_code == 200


async def test_rows_already_holding_a_lone_surrogate_do_not_break_any_read(api):
    created = await api.http.post("/runs", json={"problem": "kda", "goal": {"speedup": 2.0}})
    run_id = created.json()["id"]
    assert (await api.http.post(f"/runs/{run_id}/stop")).status_code == 202
    await api.client.get_workflow_handle(run_id).result()
    # As a row written before requests were checked holds it: JSON columns keep it as an escape
    # (a text column cannot take it at all).
    with api.db() as session:
        run = repository.get_run(session, run_id)
        run.goal = {**run.goal, "intent": f"poisoned {LONE}"}
        run.proposer = {**run.proposer, "model": LONE}
        repository.add_steering(session, run_id=run_id, kind="hint", detail={"hint": LONE, "read_by": None})

    listed = await api.http.get("/runs")
    assert listed.status_code == 200, listed.text
    assert listed.json()["data"][0]["goal"]["intent"] == "poisoned \ufffd"
    one = await api.http.get(f"/runs/{run_id}")
    assert one.status_code == 200 and one.json()["proposer"]["model"] == "\ufffd"
    steering = await api.http.get(f"/runs/{run_id}/steering")
    assert steering.status_code == 200 and steering.json()["data"][-1]["detail"]["hint"] == "\ufffd"
    page = await api.http.get(f"/runs/{run_id}/page")
    assert page.status_code == 200 and "poisoned \ufffd" in page.text
