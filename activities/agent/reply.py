"""What one model reply means to the conversation: tool calls to run, a candidate, a reason to give
up, or a note back to the model (its reply was cut off at the token cap, or held nothing usable).

Servers differ and models err: a tool call without an id gets one, arguments sent as an object
become JSON text, and an unknown tool or unreadable arguments are left for the tool step to
answer with an error, so the model can correct itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from activities.agent.tools import BadArguments, parse_arguments
from activities.proposers.llm import BODY_EXCERPT, UnusableCompletion
from activities.proposers.parse import parse_reply
from workflows.agent_types import GIVE_UP_TOOL, SUBMIT_TOOL, AgentToolCall

NAME_LIMIT = 64
REASON_LIMIT = 2000


@dataclass
class Reply:
    message: dict[str, Any]
    finish_reason: str
    tokens: int
    tool_calls: list[AgentToolCall] = field(default_factory=list)
    source: Optional[str] = None
    strategy: str = ""
    gave_up: Optional[str] = None
    note: str = ""


def cut_off_note(limit: Optional[int]) -> str:
    cap = f" ({limit} tokens)" if limit else ""
    return (f"Your reply was cut off at the token cap{cap}, so nothing in it was used. Reply shorter: one tool "
            "call, or submit_candidate with the file.")


NOTHING_NOTE = ("Your reply held no tool call and no candidate. Call a tool, submit_candidate(source, strategy), "
                "or give_up(reason).")


def _raw_calls(message: Any) -> list[dict[str, Any]]:
    calls = []
    for position, call in enumerate(getattr(message, "tool_calls", None) or []):
        function = getattr(call, "function", None)
        name = str(getattr(function, "name", "") or "")[:NAME_LIMIT]
        arguments = getattr(function, "arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, default=str)
        call_id = str(getattr(call, "id", "") or f"call_{position}")[:NAME_LIMIT]
        calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
    return calls


def _tokens(completion: Any, history: list[dict[str, Any]], reply_text: str) -> int:
    usage = getattr(completion, "usage", None)
    tokens = getattr(usage, "total_tokens", None) if usage is not None else None
    if tokens is None:
        # Some servers omit usage; about four characters a token keeps the budget honest.
        tokens = (len(json.dumps(history)) + len(reply_text)) // 4
    return int(tokens)


def read_reply(completion: Any, history: list[dict[str, Any]], limit: Optional[int]) -> Reply:
    """The reply of ``completion`` (to the conversation ``history``); ``limit`` is the token cap it was
    asked under. Raises ``UnusableCompletion`` for an answer that is not a chat completion."""
    try:
        choice = completion.choices[0]
        message = choice.message
    except (AttributeError, IndexError, TypeError):
        raise UnusableCompletion(f"no choices[0].message in {str(completion)[:BODY_EXCERPT]!r}") from None
    content = message.content or "" if isinstance(message.content, (str, type(None))) else str(message.content)
    finish = str(getattr(choice, "finish_reason", "") or "")
    calls = _raw_calls(message)
    tokens = _tokens(completion, history, content + json.dumps(calls))
    if finish == "length":
        # A cut-off reply is never used: its last tool call's arguments or its file are incomplete.
        return Reply({"role": "assistant", "content": content}, finish, tokens, note=cut_off_note(limit))
    stored: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        stored["tool_calls"] = calls
    reply = Reply(stored, finish, tokens)
    for position, call in enumerate(calls):
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        try:
            parsed = parse_arguments(name, arguments)
        except BadArguments:
            parsed = None  # answered with the error by the tool step
        if name in (SUBMIT_TOOL, GIVE_UP_TOOL):
            if parsed is not None and name == SUBMIT_TOOL:
                reply.source, reply.strategy = parsed["source"], parsed["strategy"][:200]
                return reply
            if parsed is not None:
                reply.gave_up = parsed["reason"][:REASON_LIMIT]
                return reply
        reply.tool_calls.append(AgentToolCall(position=position, call_id=call["id"], name=name, bad=parsed is None))
    if calls:
        return reply
    parsed_reply = parse_reply(content)
    if parsed_reply.source is not None:
        reply.source, reply.strategy = parsed_reply.source, parsed_reply.strategy
        return reply
    reply.note = NOTHING_NOTE
    return reply
