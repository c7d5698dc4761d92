"""Refuse request bodies over the configured size with 413, before a handler reads them."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from api.body_guard import guard_body, refuse


def too_large_message(limit: int) -> str:
    return f"request body exceeds the limit of {limit} bytes"


class BodySizeLimit:
    """Pure ASGI middleware: checks Content-Length up front and counts chunked bodies as they arrive."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                if int(declared) > self.max_bytes:
                    await refuse(send, 413, too_large_message(self.max_bytes))
                    return
            except ValueError:
                pass
        received = 0

        def check(chunk: bytes, final: bool) -> str | None:
            nonlocal received
            received += len(chunk)
            return too_large_message(self.max_bytes) if received > self.max_bytes else None

        await guard_body(self.app, scope, receive, send, check, status=413)
