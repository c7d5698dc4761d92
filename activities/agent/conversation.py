"""The agent conversation's CPU activities: "agent_prepare", "agent_model", "agent_read_tool" and
"agent_finish", bound to the store and the worker's LLM endpoint.

A model call is the llm proposer's call with tools offered: the client's own retries are off,
failures become ``ApplicationError``s that Temporal retries or not by HTTP status
(``activities.proposers.llm.as_application_error``), and the API key stays on the worker, scrubbed
from every stored message. Every message is stored before the activity returns its key, so what
Temporal records is enough to resume.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Optional

import openai
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.agent import messages as stored
from activities.agent.opening import context, openings
from activities.agent.reply import read_reply
from activities.agent.tools import TOOL_SPECS, BadArguments, parse_arguments, shown_arguments
from activities.agent.transcript import transcript_text
from activities.config import LLMEndpoint
from activities.propose import ProposeActivities, heartbeating
from activities.proposers.llm import PLACEHOLDER_KEY, UnusableCompletion, as_application_error, public_url
from workflows.agent_types import (
    AgentFinishInput,
    AgentFinishResult,
    AgentModelInput,
    AgentModelResult,
    AgentPrepareInput,
    AgentPrepareResult,
    AgentToolInput,
    AgentToolResult,
)
from workflows.run_spec import ProposerConfig

SUMMARY_LIMIT = 160
# The run's tokens left cap a reply only when they are fewer than this: a max_tokens near a whole
# run's budget is refused by servers whose context is smaller, and the budget is checked anyway.
RUN_CAP_BELOW = 8192
MIN_REPLY_TOKENS = 16


def reply_cap(max_output_tokens: Optional[int], tokens_left: Optional[int]) -> Optional[int]:
    """The ``max_tokens`` of one model call: the proposer's cap, lowered to the run's tokens left
    when those are few; None leaves the endpoint's default."""
    limit = max_output_tokens
    if tokens_left is not None and (limit is not None or tokens_left < RUN_CAP_BELOW):
        limit = max(MIN_REPLY_TOKENS, min(limit or tokens_left, tokens_left))
    return limit


class AgentActivities:
    def __init__(self, *, database_url: str, llm: Optional[LLMEndpoint] = None):
        if not database_url:
            raise ValueError("AgentActivities needs the store's database URL, got none")
        self.database_url = database_url
        self.llm = llm if llm is not None else LLMEndpoint()
        self.secret = self.llm.api_key or None

    def endpoint(self, config: ProposerConfig) -> tuple[str, str, float]:
        base_url = config.base_url or self.llm.base_url
        if not base_url:
            raise ApplicationError(
                "the agent proposer needs an endpoint: set MARATHON_LLM_BASE_URL on the worker or proposer.base_url",
                type="LLMNotConfigured", non_retryable=True)
        temperature = config.temperature if config.temperature is not None else self.llm.temperature
        return base_url, config.model or self.llm.model, temperature

    # ---- prepare --------------------------------------------------------------------------

    @activity.defn(name="agent_prepare")
    async def prepare(self, input: AgentPrepareInput) -> AgentPrepareResult:
        request = input.request
        base_url, model, _ = self.endpoint(request.proposer)
        from kernels.registry import get_problem

        async with heartbeating():
            try:
                problem = await asyncio.to_thread(get_problem, request.problem)
            except (ValueError, ImportError, AttributeError) as error:
                raise ApplicationError(str(error), type="BadProposeInput", non_retryable=True) from None
            return await asyncio.to_thread(self._prepare, request, problem, model, base_url)

    def _prepare(self, request: Any, problem: Any, model: str, base_url: str) -> AgentPrepareResult:
        reader = ProposeActivities(database_url=self.database_url, llm=self.llm)
        best_source = reader._read_best_source(request, problem)
        history = reader._read_history(request)
        keys = [[stored.store_message(self.database_url, m, self.secret) for m in opening]
                for opening in openings(request, problem, best_source)]
        texts = context(request, problem, history, best_source)
        context_sha = stored.store_text(self.database_url, json.dumps(texts, ensure_ascii=False, sort_keys=True))
        return AgentPrepareResult(openings=keys, context_sha=context_sha, model=model, endpoint=public_url(base_url))

    # ---- model call ------------------------------------------------------------------------

    @activity.defn(name="agent_model")
    async def model(self, input: AgentModelInput) -> AgentModelResult:
        base_url, model, temperature = self.endpoint(input.proposer)
        endpoint = public_url(base_url)
        history = await asyncio.to_thread(stored.load_messages, self.database_url, input.messages)
        options: dict[str, Any] = {"model": model, "messages": history, "temperature": temperature}
        if input.offer_tools:
            options["tools"] = TOOL_SPECS
        limit = reply_cap(input.proposer.max_output_tokens, input.tokens_left)
        if limit is not None:
            options["max_tokens"] = limit
        started = time.monotonic()
        client = openai.AsyncOpenAI(base_url=base_url, api_key=self.secret or PLACEHOLDER_KEY, max_retries=0,
                                    timeout=self.llm.timeout_s)
        async with heartbeating(), client:
            try:
                completion = await client.chat.completions.create(**options)
                reply = read_reply(completion, history, limit)
            except (openai.APIError, UnusableCompletion) as error:
                raise as_application_error(error, endpoint, self.secret) from None
        return await asyncio.to_thread(self._store_reply, reply, time.monotonic() - started)

    def _store_reply(self, reply: Any, seconds: float) -> AgentModelResult:
        url = self.database_url
        result = AgentModelResult(message_sha=stored.store_message(url, reply.message, self.secret),
                                  tool_calls=reply.tool_calls, finish_reason=reply.finish_reason,
                                  tokens=reply.tokens, strategy=reply.strategy, gave_up=reply.gave_up,
                                  note=reply.note, seconds=round(seconds, 3))
        if reply.source is not None:
            result.source_sha = stored.store_text(url, reply.source)
        if reply.note:
            result.note_sha = stored.store_message(url, {"role": "user", "content": reply.note}, self.secret)
        activity.logger.info("agent model call: %s, %d tokens, %d tool calls%s", reply.finish_reason,
                             reply.tokens, len(reply.tool_calls), ", candidate" if reply.source else "")
        return result

    # ---- read tools ------------------------------------------------------------------------

    @activity.defn(name="agent_read_tool")
    async def read_tool(self, input: AgentToolInput) -> AgentToolResult:
        return await asyncio.to_thread(self._read_tool, input)

    def _read_tool(self, input: AgentToolInput) -> AgentToolResult:
        started = time.monotonic()
        shown = ""
        if input.refusal is not None:
            ok, text = False, f"error: {input.refusal}"
        else:
            message = stored.load_messages(self.database_url, [input.message_sha])[0]
            name, arguments = stored.call_of(message, input.call.position)
            try:
                parsed = parse_arguments(name, arguments)
                shown = shown_arguments(parsed)
                texts = json.loads(stored.load_text(self.database_url, input.context_sha))
                if name not in texts:
                    raise BadArguments(f"{name} cannot be called now (it ends the conversation only with valid "
                                       "arguments, or it runs on the evaluation worker)")
                ok, text = True, texts[name]
            except BadArguments as error:
                ok, text = False, f"error: {error}"
        key = stored.store_message(self.database_url, stored.tool_message(input.call.call_id, text), self.secret)
        summary = text.splitlines()[0] if text else ""
        return AgentToolResult(message_sha=key, ok=ok, summary=summary[:SUMMARY_LIMIT], arguments=shown,
                               seconds=round(time.monotonic() - started, 3))

    # ---- transcript -----------------------------------------------------------------------

    @activity.defn(name="agent_finish")
    async def finish(self, input: AgentFinishInput) -> AgentFinishResult:
        return await asyncio.to_thread(self._finish, input)

    def _finish(self, input: AgentFinishInput) -> AgentFinishResult:
        history = stored.load_messages(self.database_url, input.messages)
        text = transcript_text(input, history, self.secret)
        transcript_sha = stored.store_text(self.database_url, text)
        source_sha = input.source_sha or stored.store_text(self.database_url, input.error or "no candidate")
        return AgentFinishResult(transcript_sha=transcript_sha, source_sha=source_sha)
