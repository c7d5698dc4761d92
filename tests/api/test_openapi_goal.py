"""The OpenAPI schema shows the ``{"speedup": x}`` goal shorthand the README uses (issue 13, item 8)."""

from __future__ import annotations


async def test_the_schema_shows_the_goal_shorthand(api):
    schema = (await api.anonymous.get("/openapi.json")).json()
    components = schema["components"]["schemas"]
    for name in ("GoalIn", "GoalUpdate"):
        properties = components[name]["properties"]
        assert properties["speedup"]["type"] == "number"
        assert 'Shorthand: {"speedup": x} means {"objective": "speedup", "target": x}' in properties["speedup"]["description"]
        assert "roofline" in properties
    assert {"speedup": 2.0} in components["GoalIn"]["examples"]
    assert components["RunCreate"]["examples"][0]["goal"] == {"speedup": 2.0}


async def test_the_shorthand_is_accepted_as_the_schema_says(api):
    response = await api.http.post("/runs", json={"problem": "kda", "goal": {"speedup": 2.5}})
    assert response.status_code == 201, response.text
    run = (await api.http.get(f"/runs/{response.json()['id']}")).json()
    assert run["goal"]["objective"] == "speedup" and run["goal"]["target"] == 2.5
