"""The real optimization workflow with the agent proposer against the scripted fake server over
real HTTP: tool calls (good, unknown, with malformed arguments, a failing tool), a reply cut off
at the token cap, then a candidate; the tool-call cap and the run's token cap. The judge tools'
activity is a same-name stand-in here (the real one: test_agent_judge_tools.py)."""

from __future__ import annotations

import json
import uuid

from fakes.openai_server import completion_reply
from fakes.openai_tools import call, cut_off_reply, tool_calls_reply
from proposer_requests import FAKE_KEY, GOOD_REPLY, KERNEL
from proposer_toy_problem import OBJECT_PATH as TOY_PROBLEM
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.agent import messages as stored
from marathon.local_loop import local_loop
from store.artifacts import get_text
from store.db import session_scope
from store.repository import get_run, list_attempts
from workflows.agent_types import AgentToolInput, AgentToolResult
from workflows.types import Budget, EvaluateInput, EvaluateResult, Goal, OptimizeInput, ProposerConfig

judged: list[str] = []


@activity.defn(name="evaluate")
async def evaluate(request: EvaluateInput) -> EvaluateResult:
    return EvaluateResult(status="ok", speedup=1.2, timing_kind="interpreter", gpu_seconds=0.1)


def judge_tool_for(store_url: str):
    @activity.defn(name="agent_judge_tool")
    async def judge_tool(request: AgentToolInput) -> AgentToolResult:
        judged.append(request.call.name)
        if request.call.name == "compile":
            raise ApplicationError("the compiler crashed (scripted)", type="ToolBroken", non_retryable=True)
        text = "judge verdict: ok\nerror per output: max 1e-7 (tolerance 1e-6)"
        key = stored.store_message(store_url, stored.tool_message(request.call.call_id, text), None)
        return AgentToolResult(message_sha=key, ok=True, summary=text.splitlines()[0], seconds=0.01)

    return judge_tool


def agent_run(run_id: str, evaluate_queue: str, proposer: ProposerConfig, budget: Budget) -> OptimizeInput:
    return OptimizeInput(run_id=run_id, problem=TOY_PROBLEM, goal=Goal(target=10.0, intent=f"key {FAKE_KEY}"),
                         budget=budget, proposer=proposer, candidates_per_iteration=1,
                         evaluate_task_queue=evaluate_queue, gpu_wait_s=60.0, confirm_champions=False)


async def test_an_agent_conversation_uses_tools_recovers_from_bad_calls_and_submits(
        temporal_env, fake_llm, llm_settings, store_url):
    judged.clear()
    fake_llm.script(
        tool_calls_reply(call("read_problem"), call("read_notebook"), call("frobnicate", {"x": 1}),
                         call("run", '{"source": "def kernel(x):'), total_tokens=100),
        tool_calls_reply(call("run", {"source": KERNEL}), call("compile", {"source": KERNEL}), total_tokens=100),
        cut_off_reply("Strategy: wider tiles\n```python\nimport triton\n", total_tokens=64),
        tool_calls_reply(call("submit_candidate", {"source": KERNEL, "strategy": "one program per block"}),
                         total_tokens=100),
    )
    queue, evaluate_queue = f"cpu-{uuid.uuid4().hex[:8]}", f"eval-{uuid.uuid4().hex[:8]}"
    run_id = f"run-agent-{uuid.uuid4().hex[:8]}"
    proposer = ProposerConfig(kind="agent", max_output_tokens=64, usd_per_million_tokens=2.0)
    async with local_loop(temporal_env.client, llm_settings, task_queue=queue, evaluate_queue=evaluate_queue,
                          database_url=store_url, evaluate_activities=[evaluate, judge_tool_for(store_url)]) as loop:
        result = await loop.execute(agent_run(run_id, evaluate_queue, proposer, Budget(iterations=1)))
    assert result.stop_reason == "budget_iterations"
    assert len(fake_llm.requests) == 4 and fake_llm.pending() == 0
    assert judged == ["run", "compile"]  # the unknown and malformed calls never reached the judge
    sent = [request.body for request in fake_llm.requests]
    assert all(body["max_tokens"] == 64 and "tools" in body for body in sent)
    second = fake_llm.requests[1].messages()
    tool_answers = [m["content"] for m in second if m["role"] == "tool"]
    assert len(tool_answers) == 4
    assert tool_answers[0].startswith("# Problem: toy-double") and "# Reference" in tool_answers[0]
    assert tool_answers[1].startswith("# Notebook")
    assert "there is no tool 'frobnicate'" in tool_answers[2]
    assert "not valid JSON" in tool_answers[3]
    fourth = fake_llm.requests[3].messages()
    assert "the compiler crashed (scripted)" in [m for m in fourth if m["role"] == "tool"][-1]["content"]
    assert "cut off at the token cap (64 tokens)" in fourth[-1]["content"]
    assert all(FAKE_KEY not in request.prompt_text() for request in fake_llm.requests)

    with session_scope(store_url) as session:
        attempts, total = list_attempts(session, run_id, limit=10)
        assert total == 1 and attempts[0].status == "ok" and attempts[0].strategy == "one program per block"
        assert get_text(session, attempts[0].source_sha) == KERNEL
        record = json.loads(get_text(session, attempts[0].llm_sha))
        run = get_run(session, run_id)
    assert record["agent"] is True and FAKE_KEY not in json.dumps(record)
    assert [(s["kind"], s["name"]) for s in record["steps"]] == [
        ("model", "tool_calls"), ("tool", "read_problem"), ("tool", "read_notebook"), ("tool", "frobnicate"),
        ("tool", "run"), ("model", "tool_calls"), ("tool", "run"), ("tool", "compile"), ("model", "length"),
        ("model", "tool_calls")]
    assert [s["ok"] for s in record["steps"] if s["kind"] == "tool"] == [True, True, False, False, True, False]
    assert record["usage"]["model_calls"] == 4 and record["usage"]["tool_calls"] == 6
    assert record["usage"]["tokens"] == 364 and abs(record["usage"]["usd"] - 364 * 2.0 / 1e6) < 1e-9
    assert run.budget_used["tool_calls"] == 6 and run.budget_used["model_calls"] == 4
    assert run.budget_used["tokens"] == 364


async def test_the_tool_call_cap_and_the_run_token_cap_hold(temporal_env, fake_llm, llm_settings, store_url):
    fake_llm.script(
        tool_calls_reply(call("read_problem"), call("best_attempts"), total_tokens=100),
        tool_calls_reply(call("read_notebook"), total_tokens=100),
        completion_reply(GOOD_REPLY, total_tokens=100),  # never asked for: the token cap ends the run first
    )
    queue, evaluate_queue = f"cpu-{uuid.uuid4().hex[:8]}", f"eval-{uuid.uuid4().hex[:8]}"
    run_id = f"run-agent-{uuid.uuid4().hex[:8]}"
    proposer = ProposerConfig(kind="agent", max_tool_calls=1)
    async with local_loop(temporal_env.client, llm_settings, task_queue=queue, evaluate_queue=evaluate_queue,
                          database_url=store_url, evaluate_activities=[evaluate]) as loop:
        result = await loop.execute(agent_run(run_id, evaluate_queue, proposer, Budget(iterations=5, tokens=150)))
    assert result.stop_reason == "budget_tokens" and result.iterations == 1
    assert len(fake_llm.requests) == 2 and fake_llm.pending() == 1
    first, second = (request.body for request in fake_llm.requests)
    assert first["max_tokens"] == 150 and second["max_tokens"] == 50
    assert "tools" in first and "tools" not in second  # no tool calls left: only an answer is asked for
    answers = [m["content"] for m in fake_llm.requests[1].messages() if m["role"] == "tool"]
    assert answers[0].startswith("# Problem") and "1 tool calls are spent" in answers[1]
    with session_scope(store_url) as session:
        attempts, total = list_attempts(session, run_id, limit=10)
        record = json.loads(get_text(session, attempts[0].llm_sha))
    assert total == 1 and attempts[0].status == "proposal_error"
    assert "token budget is spent" in attempts[0].message
    assert record["usage"]["tool_calls"] == 1 and record["usage"]["model_calls"] == 2


async def test_an_agent_run_without_an_endpoint_fails_with_what_to_set(temporal_env, store_url, tmp_path):
    from temporalio.client import WorkflowFailureError

    from marathon.settings import Settings

    settings = Settings(_env_file=None, home=tmp_path, llm_base_url=None)
    queue, evaluate_queue = f"cpu-{uuid.uuid4().hex[:8]}", f"eval-{uuid.uuid4().hex[:8]}"
    run_id = f"run-agent-{uuid.uuid4().hex[:8]}"
    async with local_loop(temporal_env.client, settings, task_queue=queue, evaluate_queue=evaluate_queue,
                          database_url=store_url, evaluate_activities=[evaluate]) as loop:
        try:
            await loop.execute(agent_run(run_id, evaluate_queue, ProposerConfig(kind="agent"), Budget(iterations=3)))
        except WorkflowFailureError as failure:
            reason = str(failure.cause)
        else:
            raise AssertionError("the run should have failed")
    assert "the agent proposer cannot work (iteration 1)" in reason and "MARATHON_LLM_BASE_URL" in reason
    with session_scope(store_url) as session:
        run = get_run(session, run_id)
        assert run.status == "failed" and list_attempts(session, run_id, limit=1)[1] == 0
