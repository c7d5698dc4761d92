"""The agent conversation's activity calls: each by name, with its queue, timeouts and retries.

One model call and one tool call are one activity each, so Temporal records every step: a worker
that dies mid-conversation leaves a history the next worker replays without asking the model or
running a tool again. Messages travel by artifact key (``workflows.agent_types``).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from workflows.agent_types import (
    JUDGE_TOOLS,
    AgentFinishInput,
    AgentFinishResult,
    AgentModelInput,
    AgentModelResult,
    AgentPrepareInput,
    AgentPrepareResult,
    AgentToolInput,
    AgentToolResult,
)
from workflows.steps import BAD_INPUT_ERRORS

# A model call may wait on a slow endpoint (the worker's LLM timeout) and is retried on 429/5xx
# like the llm proposer's; a dead worker is noticed at the next missed heartbeat.
MODEL_TIMEOUT = timedelta(minutes=10)
MODEL_HEARTBEAT = timedelta(seconds=20)
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    maximum_interval=timedelta(minutes=2),
    maximum_attempts=6,
    non_retryable_error_types=BAD_INPUT_ERRORS + ["LLMRequestRejected", "LLMNotConfigured"],
)
READ_TIMEOUT = timedelta(seconds=60)
READ_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=30), maximum_attempts=5,
                         non_retryable_error_types=BAD_INPUT_ERRORS)
JUDGE_HEARTBEAT = timedelta(seconds=20)
JUDGE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=5), maximum_attempts=2,
                          non_retryable_error_types=BAD_INPUT_ERRORS + ["IsolationUnavailable"])


def _own_queue() -> str:
    return workflow.info().task_queue


async def prepare(request: AgentPrepareInput, summary: str) -> AgentPrepareResult:
    """Activity "agent_prepare": the openings of this iteration's conversations and their context."""
    return await workflow.execute_activity(
        "agent_prepare", request, result_type=AgentPrepareResult, task_queue=_own_queue(),
        start_to_close_timeout=timedelta(minutes=5), heartbeat_timeout=MODEL_HEARTBEAT,
        retry_policy=READ_RETRY, summary=summary,
    )


async def model(request: AgentModelInput, summary: str) -> AgentModelResult:
    """Activity "agent_model": one chat completion."""
    return await workflow.execute_activity(
        "agent_model", request, result_type=AgentModelResult, task_queue=_own_queue(),
        start_to_close_timeout=MODEL_TIMEOUT, heartbeat_timeout=MODEL_HEARTBEAT,
        retry_policy=MODEL_RETRY, summary=summary,
    )


async def tool(request: AgentToolInput, evaluate_queue: str, judge_timeout_s: float, gpu_wait_s: float,
               summary: str) -> AgentToolResult:
    """Activity "agent_judge_tool" on the evaluation queue for a tool that runs the judge, else
    "agent_read_tool" on the workflow's own queue (which also answers refused and malformed calls)."""
    if request.refusal is None and request.call.name in JUDGE_TOOLS and not request.call.bad:
        return await workflow.execute_activity(
            "agent_judge_tool", request, result_type=AgentToolResult, task_queue=evaluate_queue,
            schedule_to_start_timeout=timedelta(seconds=gpu_wait_s),
            start_to_close_timeout=timedelta(seconds=judge_timeout_s * 2 + 120),
            heartbeat_timeout=JUDGE_HEARTBEAT, retry_policy=JUDGE_RETRY, summary=summary,
        )
    return await workflow.execute_activity(
        "agent_read_tool", request, result_type=AgentToolResult, task_queue=_own_queue(),
        start_to_close_timeout=READ_TIMEOUT, retry_policy=READ_RETRY, summary=summary,
    )


async def finish(request: AgentFinishInput, summary: str) -> AgentFinishResult:
    """Activity "agent_finish": the conversation's transcript (redacted, clipped) into the store."""
    return await workflow.execute_activity(
        "agent_finish", request, result_type=AgentFinishResult, task_queue=_own_queue(),
        start_to_close_timeout=READ_TIMEOUT, retry_policy=READ_RETRY, summary=summary,
    )
