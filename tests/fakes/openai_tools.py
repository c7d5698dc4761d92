"""Scripted replies with tool calls (the OpenAI ``tool_calls`` format) for ``FakeOpenAIServer``:
the agent proposer's tests queue these next to ``completion_reply``."""

from __future__ import annotations

import json
import time
from typing import Any, Optional

from tests.fakes.openai_server import ScriptedReply


def _body(message: dict[str, Any], finish_reason: str, total_tokens: Optional[int]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "fake-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    if total_tokens is not None:
        body["usage"] = {"prompt_tokens": total_tokens // 2, "completion_tokens": total_tokens - total_tokens // 2,
                         "total_tokens": total_tokens}
    return body


def call(name: str, arguments: Any = None, call_id: Optional[str] = None) -> dict[str, Any]:
    """One tool call; ``arguments`` given as text is sent as is (malformed JSON included)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {"id": call_id or f"call_{name}_{abs(hash(text)) % 10_000}", "type": "function",
            "function": {"name": name, "arguments": text}}


def tool_calls_reply(*calls: dict[str, Any], content: Optional[str] = None, total_tokens: Optional[int] = 100,
                     finish_reason: str = "tool_calls") -> ScriptedReply:
    message = {"role": "assistant", "content": content, "tool_calls": list(calls)}
    return ScriptedReply(body=_body(message, finish_reason, total_tokens))


def cut_off_reply(content: str, total_tokens: int = 64) -> ScriptedReply:
    """A reply the server stopped at the token cap (``finish_reason`` "length")."""
    return ScriptedReply(body=_body({"role": "assistant", "content": content}, "length", total_tokens))
