"""A conversation's messages in the artifact store: one JSON artifact per message, redacted before
it is stored, addressed by its sha256 (so a retried activity stores the same key again)."""

from __future__ import annotations

import json
from typing import Any, Optional

from temporalio.exceptions import ApplicationError

from activities.proposers.llm import scrub


def _scrubbed(message: dict[str, Any], secret: Optional[str]) -> dict[str, Any]:
    kept = {key: value for key, value in message.items() if key != "tool_calls"}
    if isinstance(kept.get("content"), str):
        kept["content"] = scrub(kept["content"], secret)
    if message.get("tool_calls"):
        kept["tool_calls"] = [
            {"id": call["id"], "type": "function",
             "function": {"name": scrub(call["function"]["name"], secret),
                          "arguments": scrub(call["function"]["arguments"], secret)}}
            for call in message["tool_calls"]
        ]
    return kept


def store_message(database_url: str, message: dict[str, Any], secret: Optional[str]) -> str:
    """Put ``message`` (an OpenAI chat message), redacted, into the store; its key."""
    from store.artifacts import put_text
    from store.db import session_scope

    text = json.dumps(_scrubbed(message, secret), ensure_ascii=False, sort_keys=True)
    with session_scope(database_url) as session:
        return put_text(session, text)


def load_messages(database_url: str, keys: list[str]) -> list[dict[str, Any]]:
    """The messages stored under ``keys``, in order; a missing one fails the step for good."""
    from store.artifacts import get_text
    from store.db import session_scope

    messages = []
    with session_scope(database_url, read_only=True) as session:
        for key in keys:
            try:
                messages.append(json.loads(get_text(session, key)))
            except KeyError:
                raise ApplicationError(f"the conversation's message {key} is not in the artifact store",
                                       type="MissingArtifact", non_retryable=True) from None
    return messages


def load_text(database_url: str, key: str) -> str:
    from store.artifacts import get_text
    from store.db import session_scope

    with session_scope(database_url, read_only=True) as session:
        try:
            return get_text(session, key)
        except KeyError:
            raise ApplicationError(f"artifact {key} is not in the store", type="MissingArtifact",
                                   non_retryable=True) from None


def store_text(database_url: str, text: str) -> str:
    from store.artifacts import put_text
    from store.db import session_scope

    with session_scope(database_url) as session:
        return put_text(session, text)


def call_of(message: dict[str, Any], position: int) -> tuple[str, str]:
    """The name and argument text of tool call ``position`` of an assistant message."""
    calls = message.get("tool_calls") or []
    if not 0 <= position < len(calls):
        raise ApplicationError(f"the message has {len(calls)} tool calls, none at position {position}",
                               type="BadInput", non_retryable=True)
    function = calls[position]["function"]
    return function["name"], function["arguments"]


def tool_message(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}
