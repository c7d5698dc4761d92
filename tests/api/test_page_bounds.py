"""Numbers the run page draws are bounded: the schema states the ceiling of a goal target, and
the page copes with any stored value (a goal target of 1e308 used to make its log axis compute
10.0 ** 309 and answer 500)."""

from __future__ import annotations

import math

import pytest

from api.page_plot import PlotPoint, Y_CEILING, speedup_svg
from api.schemas import TARGET_MAX
from store import repository
from store.artifacts import put_text


async def test_a_goal_target_past_the_stated_ceiling_is_refused(api):
    schema = (await api.anonymous.get("/openapi.json")).json()["components"]["schemas"]
    assert schema["GoalIn"]["properties"]["target"]["maximum"] == TARGET_MAX
    assert schema["GoalIn"]["properties"]["speedup"]["maximum"] == TARGET_MAX
    assert schema["GoalUpdate"]["properties"]["target"]["anyOf"][0]["maximum"] == TARGET_MAX
    for goal in ({"speedup": 1e308}, {"objective": "speedup", "target": TARGET_MAX * 2}):
        response = await api.http.post("/runs", json={"problem": "kda", "goal": goal})
        assert response.status_code == 422, response.text
        assert response.json()["detail"][0]["loc"] == ["body", "goal", "target"]
    created = await api.http.post("/runs", json={"problem": "kda", "goal": {"speedup": TARGET_MAX}})
    assert created.status_code == 201, created.text
    patched = await api.http.patch(f"/runs/{created.json()['id']}/goal", json={"target": 1e308})
    assert patched.status_code == 422 and (await api.http.get(f"/runs/{created.json()['id']}/steering")).json()[
        "count"] == 0


async def test_the_page_draws_any_stored_value(api):
    run_id = (await api.http.post("/runs", json={"problem": "kda"})).json()["id"]
    assert (await api.http.post(f"/runs/{run_id}/stop")).status_code == 202
    await api.client.get_workflow_handle(run_id).result()
    with api.db() as session:
        run = repository.get_run(session, run_id)
        run.goal = {**run.goal, "target": 1e308}
        source = put_text(session, "def kernel(q):\n    return q\n")
        for index, speedup in enumerate([1e308, 1e-300, 0.0, 2.0]):
            repository.record_attempt(
                session, run_id=run_id, iteration=10**6 * index, index=index, strategy="s", knobs=None,
                source_sha=source, status="ok", message="", speedup=speedup, roofline=None, timing_kind="gpu",
                report_sha=None, is_best=False, gpu_seconds=0.1,
            )
    page = await api.http.get(f"/runs/{run_id}/page")
    assert page.status_code == 200, page.text
    assert "goal 1e+308x" in page.text
    assert (await api.http.get(f"/runs/{run_id}")).status_code == 200


@pytest.mark.parametrize("goal", [1e308, math.inf, math.nan, -1.0, None], ids=str)
def test_the_plot_keeps_its_axis_within_bounds(goal):
    points = [PlotPoint(1, 0, "ok", 1e308), PlotPoint(2, 0, "ok", math.inf), PlotPoint(3, 0, "ok", math.nan),
              PlotPoint(4, 0, "ok", 1e-308), PlotPoint(2**62, 0, "ok", 1.5)]
    svg = speedup_svg(points, goal)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert f"{Y_CEILING:g}x" in svg and "nan" not in svg.split("<title>")[0]
