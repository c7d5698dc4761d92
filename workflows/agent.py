"""The agent proposer: for each candidate, a bounded conversation in which a model calls tools
(compile, run, time, ncu, read the problem, the notebook and the best attempts) and ends with a
candidate or gives up with a reason.

Each conversation is a child workflow (``AgentConversationWorkflow``); each model call and each
tool call in it is an activity (``workflows.agent_steps``). A worker that dies mid-conversation
leaves a history the next one replays: no model call is paid twice and no tool result is lost.
The conversation's messages are artifacts, addressed by key, never in the history.

``propose`` is what the optimization loop calls in place of the "propose" activity when the run's
proposer is "agent".
"""

from __future__ import annotations

from datetime import timedelta
from typing import Optional

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from workflows import agent_steps as steps
    from workflows.agent_types import (
        AgentConversationInput,
        AgentConversationResult,
        AgentFinishInput,
        AgentModelInput,
        AgentModelResult,
        AgentPrepareInput,
        AgentStep,
        AgentToolInput,
        AgentUsage,
    )
    from workflows.steps import failure_message
    from workflows.types import Candidate, OptimizeInput, ProposeInput, ProposeResult, RunState

# Model calls beyond the tool-call cap: one to answer after the last tool, one after a cut-off reply.
EXTRA_MODEL_CALLS = 2
SUMMARY_LIMIT = 160


def tool_cap_refusal(cap: int) -> str:
    return (f"not run: this candidate's {cap} tool calls are spent. Submit your candidate now "
            "(submit_candidate, or a fenced python block) or give up with a reason.")


@workflow.defn
class AgentConversationWorkflow:
    """One candidate's conversation. Its usage is a query, and the Temporal UI shows it live."""

    @workflow.init
    def __init__(self, input: AgentConversationInput) -> None:
        self._input = input
        self._usage = AgentUsage()
        self._steps: list[AgentStep] = []
        self._messages = list(input.opening)

    @workflow.query
    def usage(self) -> AgentUsage:
        return self._usage

    @workflow.query
    def steps(self) -> list[AgentStep]:
        return self._steps

    @workflow.run
    async def run(self, input: AgentConversationInput) -> AgentConversationResult:
        started = workflow.time()
        model_calls = input.proposer.max_tool_calls + EXTRA_MODEL_CALLS
        reply: Optional[AgentModelResult] = None
        error: Optional[str] = None
        cap = ""
        for turn in range(model_calls):
            cap, error = self._run_cap()
            if cap:
                break
            last_turn = turn == model_calls - 1
            try:
                reply = await self._ask(offer_tools=not last_turn and self._tools_left() > 0)
            except ActivityError as failure:
                error = f"the model call failed: {failure_message(failure)}"
                reply = None
                break
            if reply.source_sha is not None or reply.gave_up is not None:
                break
            for call in reply.tool_calls:
                await self._call_tool(reply.message_sha, call)
            reply = None
        else:
            error = f"no candidate after {model_calls} model calls"
        if reply is not None and reply.gave_up is not None:
            error = f"the agent gave up: {reply.gave_up}"
        self._usage.wall_s = round(workflow.time() - started, 3)
        return await self._finish(reply, error, cap)

    # ---- budgets ----------------------------------------------------------------------

    def _tools_left(self) -> int:
        return self._input.proposer.max_tool_calls - self._usage.tool_calls

    def _run_cap(self) -> tuple[str, Optional[str]]:
        """The run-wide cap this conversation has reached ("budget_tokens", "budget_usd"), if any."""
        inp, used = self._input, self._usage
        if inp.tokens_left is not None and used.tokens >= inp.tokens_left:
            return "budget_tokens", f"the run's token budget is spent ({used.tokens} tokens used here)"
        if inp.usd_left is not None and used.usd >= inp.usd_left:
            return "budget_usd", f"the run's money budget is spent (${used.usd:.4f} used here)"
        return "", None

    # ---- steps --------------------------------------------------------------------------

    async def _ask(self, offer_tools: bool) -> AgentModelResult:
        inp, used = self._input, self._usage
        tokens_left = None if inp.tokens_left is None else inp.tokens_left - used.tokens
        request = AgentModelInput(run_id=inp.run_id, proposer=inp.proposer, messages=list(self._messages),
                                  offer_tools=offer_tools, tokens_left=tokens_left)
        label = f"iter {inp.iteration} #{inp.index} · model call {used.model_calls + 1}"
        asked = workflow.time()
        reply = await steps.model(request, label)
        elapsed = round(workflow.time() - asked, 3)
        used.model_calls += 1
        used.tokens += reply.tokens
        if inp.proposer.usd_per_million_tokens is not None:
            used.usd = round(used.usd + reply.tokens * inp.proposer.usd_per_million_tokens / 1e6, 8)
        self._messages.append(reply.message_sha)
        if reply.note_sha is not None:
            self._messages.append(reply.note_sha)
        summary = reply.note or ", ".join(call.name for call in reply.tool_calls) or (
            "candidate" if reply.source_sha else "gave up" if reply.gave_up is not None else "answer")
        self._steps.append(AgentStep(kind="model", name=reply.finish_reason or "reply", summary=summary[:SUMMARY_LIMIT],
                                     seconds=reply.seconds, tokens=reply.tokens, elapsed_s=elapsed))
        self._show()
        return reply

    async def _call_tool(self, message_sha: str, call) -> None:
        inp, used = self._input, self._usage
        refusal = None if self._tools_left() > 0 else tool_cap_refusal(inp.proposer.max_tool_calls)
        request = AgentToolInput(run_id=inp.run_id, problem=inp.problem, message_sha=message_sha, call=call,
                                 context_sha=inp.context_sha, refusal=refusal)
        label = f"iter {inp.iteration} #{inp.index} · tool {call.name[:40]}"
        asked = workflow.time()
        try:
            result = await steps.tool(request, inp.evaluate_queue, inp.judge_timeout_s, inp.gpu_wait_s, label)
        except ActivityError as failure:
            # The tool's worker failed for good (or none picked it up): the model hears why, the
            # conversation goes on.
            request.refusal = f"the tool failed: {failure_message(failure)[:2000]}"
            result = await steps.tool(request, inp.evaluate_queue, inp.judge_timeout_s, inp.gpu_wait_s, label)
        if refusal is None:
            used.tool_calls += 1
            used.tool_s = round(used.tool_s + result.seconds, 3)
            used.gpu_busy_s = round(used.gpu_busy_s + (result.gpu_busy_s or 0.0), 3)
        self._messages.append(result.message_sha)
        self._steps.append(AgentStep(kind="tool", name=call.name[:64], summary=result.summary[:SUMMARY_LIMIT],
                                     seconds=result.seconds, ok=result.ok, arguments=result.arguments,
                                     elapsed_s=round(workflow.time() - asked, 3)))
        self._show()

    async def _finish(self, reply: Optional[AgentModelResult], error: Optional[str], cap: str
                      ) -> AgentConversationResult:
        inp = self._input
        source_sha = reply.source_sha if reply is not None and error is None else None
        strategy = reply.strategy if reply is not None else ""
        request = AgentFinishInput(run_id=inp.run_id, messages=self._messages, steps=self._steps, usage=self._usage,
                                   model=inp.model, endpoint=inp.endpoint, source_sha=source_sha,
                                   strategy=strategy, error=error)
        done = await steps.finish(request, f"iter {inp.iteration} #{inp.index} · transcript")
        return AgentConversationResult(index=inp.index, source_sha=done.source_sha, strategy=strategy or "agent",
                                       transcript_sha=done.transcript_sha, usage=self._usage, error=error, cap=cap)

    def _show(self) -> None:
        used = self._usage
        workflow.set_current_details(
            f"candidate {self._input.index}: {used.model_calls} model calls, {used.tool_calls} tool calls, "
            f"{used.tokens} tokens" + (f", ${used.usd:.4f}" if self._input.proposer.usd_per_million_tokens else "")
        )


async def propose(inp: OptimizeInput, state: RunState, request: ProposeInput, summary: str) -> ProposeResult:
    """The loop's proposal step for the agent proposer: one conversation per candidate, one after
    another so the run's token and money caps hold exactly. The use of each is counted into
    ``state`` as it ends (``show`` sees it live); the result's ``tokens_used`` is the total. A
    failing "agent_prepare" raises ``ActivityError`` as the "propose" activity would."""
    prepared = await steps.prepare(AgentPrepareInput(request=request), summary)
    result = ProposeResult(candidates=[])
    for index, opening in enumerate(prepared.openings):
        tokens_left = None if request.tokens_left is None else request.tokens_left - result.tokens_used
        usd_left = None if inp.budget.usd is None else max(0.0, inp.budget.usd - state.usd)
        if state.stop_requested:
            result.errors.append(f"stopped before candidate {index + 1} of {request.count}")
            break
        child = AgentConversationInput(
            run_id=inp.run_id, problem=inp.problem, iteration=request.iteration, index=index,
            proposer=inp.proposer, opening=opening, context_sha=prepared.context_sha,
            evaluate_queue=inp.evaluate_task_queue or "", model=prepared.model, endpoint=prepared.endpoint,
            tokens_left=tokens_left, usd_left=usd_left, judge_timeout_s=inp.evaluate_timeout_s,
            gpu_wait_s=inp.gpu_wait_s,
        )
        try:
            done = await workflow.execute_child_workflow(
                AgentConversationWorkflow.run, child,
                id=f"{workflow.info().workflow_id}-agent-{request.iteration}-{index}",
                task_queue=workflow.info().task_queue, execution_timeout=timedelta(hours=6),
                static_summary=f"iter {request.iteration} · agent candidate {index + 1} of {request.count}",
            )
        except ChildWorkflowError as failure:
            result.errors.append(f"candidate {index + 1}: the conversation failed: {failure_message(failure)}")
            continue
        _count(state, result, done)
        result.candidates.append(Candidate(index=len(result.candidates), source_sha=done.source_sha,
                                           strategy=done.strategy, error=done.error, llm_sha=done.transcript_sha))
        if done.cap:
            result.errors.append(f"candidate {index + 1}: {done.error}")
            break
    return result


def _count(state: RunState, result: ProposeResult, done: AgentConversationResult) -> None:
    used = done.usage
    state.tokens += used.tokens
    state.usd = round(state.usd + used.usd, 8)
    state.tool_calls += used.tool_calls
    state.model_calls += used.model_calls
    result.tokens_used += used.tokens
    result.usd_used = round(result.usd_used + used.usd, 8)
    result.tool_calls += used.tool_calls
    result.model_calls += used.model_calls
