"""A worker that holds an agent conversation goes away between two tool calls; a new worker picks
the conversation up from Temporal's history: no model call is made twice (the fake server counts
them), no tool runs twice, and the candidate and its transcript are complete."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta

from fakes.openai_tools import call, tool_calls_reply
from proposer_requests import KERNEL
from proposer_toy_problem import OBJECT_PATH as TOY_PROBLEM
from temporalio import activity
from temporalio.worker import Worker

from activities.agent import messages as stored
from marathon.workers import build_cpu_worker
from store.artifacts import get_text
from store.db import session_scope
from store.repository import list_attempts
from workflows.agent_types import AgentToolInput, AgentToolResult
from workflows.optimize import OptimizeKernelWorkflow
from workflows.types import Budget, EvaluateInput, EvaluateResult, Goal, OptimizeInput, ProposerConfig


@activity.defn(name="evaluate")
async def evaluate(request: EvaluateInput) -> EvaluateResult:
    return EvaluateResult(status="ok", speedup=1.3, timing_kind="interpreter", gpu_seconds=0.1)


class BlockingTools:
    """The judge tools' stand-in: counts its runs; the second one waits until the test lets it go."""

    def __init__(self, store_url: str) -> None:
        self.store_url = store_url
        self.runs: list[str] = []
        self.second_started = asyncio.Event()
        self.release = asyncio.Event()

    @activity.defn(name="agent_judge_tool")
    async def judge_tool(self, request: AgentToolInput) -> AgentToolResult:
        self.runs.append(request.call.call_id)
        if len(self.runs) == 2:
            self.second_started.set()
            await self.release.wait()
        text = f"judge verdict: ok (run {len(self.runs)})"
        key = stored.store_message(self.store_url, stored.tool_message(request.call.call_id, text), None)
        return AgentToolResult(message_sha=key, ok=True, summary=text, seconds=0.01)


def cpu_worker(client, settings, queue: str, store_url: str) -> Worker:
    # A short sticky timeout: the next worker gets the workflow task soon after the first is gone.
    return build_cpu_worker(client, settings, task_queue=queue, database_url=store_url,
                            graceful_shutdown_timeout=timedelta(seconds=1),
                            sticky_queue_schedule_to_start_timeout=timedelta(seconds=1))


async def test_a_conversation_survives_its_worker_between_two_tool_calls(
        temporal_env, fake_llm, llm_settings, store_url):
    fake_llm.script(
        tool_calls_reply(call("run", {"source": KERNEL}, call_id="call_a"), total_tokens=100),
        tool_calls_reply(call("time", {"source": KERNEL}, call_id="call_b"), total_tokens=100),
        tool_calls_reply(call("submit_candidate", {"source": KERNEL, "strategy": "after two tools"}),
                         total_tokens=100),
    )
    client = temporal_env.client
    queue, evaluate_queue = f"cpu-{uuid.uuid4().hex[:8]}", f"eval-{uuid.uuid4().hex[:8]}"
    run_id = f"run-agent-crash-{uuid.uuid4().hex[:8]}"
    tools = BlockingTools(store_url)
    evaluation = Worker(client, task_queue=evaluate_queue, activities=[evaluate, tools.judge_tool])
    async with evaluation:
        first = cpu_worker(client, llm_settings, queue, store_url)
        first_task = asyncio.create_task(first.run())
        handle = await client.start_workflow(
            OptimizeKernelWorkflow.run,
            OptimizeInput(run_id=run_id, problem=TOY_PROBLEM, goal=Goal(target=10.0), budget=Budget(iterations=1),
                          proposer=ProposerConfig(kind="agent"), candidates_per_iteration=1,
                          evaluate_task_queue=evaluate_queue, gpu_wait_s=60.0, confirm_champions=False),
            id=run_id, task_queue=queue,
        )
        await asyncio.wait_for(tools.second_started.wait(), timeout=60)
        assert len(fake_llm.requests) == 2
        await first.shutdown()  # the worker holding the conversation is gone; its cache with it
        await first_task
        async with cpu_worker(client, llm_settings, queue, store_url):
            tools.release.set()
            result = await asyncio.wait_for(handle.result(), timeout=90)
    assert result.iterations == 1
    assert len(fake_llm.requests) == 3 and fake_llm.pending() == 0  # no model call paid twice
    assert tools.runs == ["call_a", "call_b"]  # no tool ran twice
    last = fake_llm.requests[2].messages()
    assert [m["content"] for m in last if m["role"] == "tool"] == ["judge verdict: ok (run 1)",
                                                                    "judge verdict: ok (run 2)"]
    with session_scope(store_url) as session:
        attempts, total = list_attempts(session, run_id, limit=10)
        record = json.loads(get_text(session, attempts[0].llm_sha))
    assert total == 1 and attempts[0].status == "ok" and attempts[0].strategy == "after two tools"
    assert [(s["kind"], s["name"]) for s in record["steps"]] == [
        ("model", "tool_calls"), ("tool", "run"), ("model", "tool_calls"), ("tool", "time"), ("model", "tool_calls")]
    assert record["usage"]["model_calls"] == 3 and record["usage"]["tool_calls"] == 2
