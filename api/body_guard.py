"""The plumbing both request-body guards share (size, encoding): read the body chunk by chunk as
the app asks for it, and refuse it with a JSON error the moment one chunk is wrong, before a
handler has parsed anything. Each guard says only what is wrong with a chunk."""

from __future__ import annotations

import json
from typing import Callable, Optional

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# (the chunk, whether it is the body's last) -> why the body is refused, or None.
ChunkCheck = Callable[[bytes, bool], Optional[str]]


async def refuse(send: Send, status: int, detail: str) -> None:
    """Answer ``status`` with ``{"detail": detail}`` as JSON."""
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def guard_body(app: ASGIApp, scope: Scope, receive: Receive, send: Send, check: ChunkCheck,
                     status: int) -> None:
    """Run ``app`` with each request chunk passed through ``check`` first. On the first refusal
    (while no response has started) answer ``status`` now and tell the app the client went away,
    so it stops reading; whatever the app sends after that is dropped."""
    refused = False
    response_started = False

    async def checking_receive() -> Message:
        nonlocal refused
        if refused:
            return {"type": "http.disconnect"}
        message = await receive()
        if message["type"] != "http.request":
            return message
        reason = check(message.get("body", b""), not message.get("more_body", False))
        if reason is not None and not response_started:
            refused = True
            await refuse(send, status, reason)
            return {"type": "http.disconnect"}
        return message

    async def guarded_send(message: Message) -> None:
        nonlocal response_started
        if refused:
            return
        if message["type"] == "http.response.start":
            response_started = True
        await send(message)

    await app(scope, checking_receive, guarded_send)
