"""The JSON kept with each attempt the agent wrote: the conversation's messages (redacted, each
text clipped), its steps (tool, arguments, result summary, time) and its use (model and tool
calls, tokens, money, wall time). Same keys as the llm proposer's transcript, plus ``agent``."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

from activities.proposers.llm import TRANSCRIPT_TEXT_LIMIT, scrub
from workflows.agent_types import AgentFinishInput


def _clip(text: str) -> tuple[str, bool]:
    if len(text) <= TRANSCRIPT_TEXT_LIMIT:
        return text, False
    return text[:TRANSCRIPT_TEXT_LIMIT] + f"\n[... {len(text) - TRANSCRIPT_TEXT_LIMIT} characters clipped]", True


def _message(message: dict[str, Any], secret: Optional[str]) -> tuple[dict[str, Any], bool]:
    content, clipped = _clip(scrub(str(message.get("content") or ""), secret))
    kept: dict[str, Any] = {"role": str(message.get("role", "")), "content": content}
    if message.get("tool_call_id"):
        kept["tool_call_id"] = str(message["tool_call_id"])
    calls = []
    for call in message.get("tool_calls") or []:
        arguments, cut = _clip(scrub(str(call["function"]["arguments"]), secret))
        clipped |= cut
        calls.append({"id": call["id"], "name": scrub(call["function"]["name"], secret), "arguments": arguments})
    if calls:
        kept["tool_calls"] = calls
    return kept, clipped


def transcript_text(finish: AgentFinishInput, history: list[dict[str, Any]], secret: Optional[str]) -> str:
    kept, clipped = [], False
    for message in history:
        entry, cut = _message(message, secret)
        kept.append(entry)
        clipped |= cut
    replies = [m["content"] for m in kept if m["role"] == "assistant" and m["content"]]
    usage = dataclasses.asdict(finish.usage)
    record = {
        "agent": True,
        "model": scrub(finish.model, secret),
        "endpoint": scrub(finish.endpoint, secret),
        "messages": kept,
        "reply": replies[-1] if replies else "",
        "tokens": finish.usage.tokens,
        "usage": usage,
        "steps": [dataclasses.asdict(step) for step in finish.steps],
        "strategy": finish.strategy,
        "error": scrub(finish.error, secret) if finish.error else None,
        "clipped": clipped,
    }
    return json.dumps(record, ensure_ascii=False)
