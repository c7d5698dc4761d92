"""An agent run through the API: POST /runs with ``proposer.kind = "agent"`` against the scripted
fake model, the real agent activities and the real judge tools (on the CPU); what it used and its
steps read back through GET /runs, the attempt's LLM exchange and the run page. Evaluations are a
same-name stand-in."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio import activity

from activities.agent.judge_tools import AgentJudgeTools
from marathon.local_loop import local_loop
from tests.api.test_api_end_to_end import wait_for_evaluator
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.openai_tools import call, tool_calls_reply
from workflows.types import EvaluateInput, EvaluateResult

HONEST = (Path(__file__).parents[1] / "judge" / "candidates" / "honest_cumsum.py").read_text()


@activity.defn(name="evaluate")
async def evaluate(request: EvaluateInput) -> EvaluateResult:
    return EvaluateResult(status="ok", speedup=1.25, timing_kind="interpreter", gpu_seconds=0.1)


async def test_an_agent_run_through_the_api_shows_its_use_and_steps(bare_api):
    api = bare_api
    url = api.settings.resolved_database_url
    evaluate_queue = f"{api.settings.gpu_task_queue_prefix}cpu"
    with FakeOpenAIServer() as model:
        model.script(
            tool_calls_reply(call("run", {"source": HONEST}), total_tokens=300),
            tool_calls_reply(call("ncu", {"source": HONEST}), total_tokens=200),
            tool_calls_reply(call("submit_candidate", {"source": HONEST, "strategy": "checked, then submitted"}),
                             total_tokens=100),
        )
        async with local_loop(api.client, api.settings, task_queue=api.task_queue, evaluate_queue=evaluate_queue,
                              database_url=url,
                              evaluate_activities=[evaluate, AgentJudgeTools(url, device="cpu").judge_tool]):
            await wait_for_evaluator(api, evaluate_queue)
            body = {
                "problem": "tests.judge.toy:PROBLEM",
                "goal": {"speedup": 100},
                "budget": {"iterations": 1, "usd": 5.0},
                "candidates_per_iteration": 1,
                "proposer": {"kind": "agent", "base_url": model.base_url, "max_tool_calls": 4,
                             "usd_per_million_tokens": 10.0},
            }
            response = await api.http.post("/runs", json=body)
            assert response.status_code == 201, response.text
            run_id = response.json()["id"]
            await asyncio.wait_for(api.client.get_workflow_handle(run_id).result(), timeout=240)
        assert len(model.requests) == 3 and model.pending() == 0
        tool_answers = [m["content"] for m in model.requests[1].messages() if m["role"] == "tool"]
    assert tool_answers[0].startswith("judge verdict: ok") and "error per output" in tool_answers[0]

    run = (await api.http.get(f"/runs/{run_id}")).json()
    assert run["status"] == "completed" and run["proposer"]["kind"] == "agent"
    used = run["budget_used"]
    assert used["tool_calls"] == 2 and used["model_calls"] == 3 and used["tokens"] == 600
    assert abs(used["usd"] - 600 * 10.0 / 1e6) < 1e-9

    attempts = (await api.http.get(f"/runs/{run_id}/attempts")).json()["data"]
    assert len(attempts) == 1 and attempts[0]["strategy"] == "checked, then submitted"
    exchange = (await api.http.get(attempts[0]["llm_url"])).json()
    steps = exchange["transcript"]["steps"]
    assert [(s["kind"], s["name"], s["ok"]) for s in steps] == [
        ("model", "tool_calls", True), ("tool", "run", True), ("model", "tool_calls", True),
        ("tool", "ncu", False), ("model", "tool_calls", True)]
    assert "not available on this worker" in steps[3]["summary"]
    text = (await api.http.get(attempts[0]["llm_url"], params={"format": "text"})).text
    assert "===== agent steps =====" in text and "3 model calls, 2 tool calls, 600 tokens" in text
    page = (await api.http.get(f"/runs/{run_id}/page")).text
    assert "5 agent steps" in page  # the steps are listed with their attempt
    assert "tool run(source: " in page
