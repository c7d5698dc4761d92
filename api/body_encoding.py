"""Refuse JSON request bodies that are not UTF-8 with 400, before a handler parses them.

Python's JSON parser guesses UTF-16 and UTF-32 from the bytes, so without this check a UTF-16
body would be read although the API documents UTF-8 (RFC 8259 requires it between systems).
A raw NUL byte is refused too: JSON text never holds one, and UTF-16 without a byte-order mark
is ASCII interleaved with NULs, which is valid UTF-8.
"""

from __future__ import annotations

import codecs

from starlette.types import ASGIApp, Receive, Scope, Send

from api.body_guard import guard_body


def not_utf8_message(offset: int, reason: str) -> str:
    return f"the request body is not UTF-8 JSON ({reason} at byte {offset}): send JSON encoded as UTF-8"


def _checks_body(scope: Scope) -> bool:
    """JSON bodies, and bodies without a content type (FastAPI reads those as JSON too)."""
    content_type = dict(scope.get("headers") or []).get(b"content-type", b"").lower()
    return not content_type or b"json" in content_type


class Utf8JsonBody:
    """Pure ASGI middleware: decodes each chunk as it arrives (no copy of the body is kept)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _checks_body(scope):
            await self.app(scope, receive, send)
            return
        decoder = codecs.getincrementaldecoder("utf-8")()
        seen = 0

        def check(chunk: bytes, final: bool) -> str | None:
            nonlocal seen
            reason = _problem(decoder, chunk, seen, final)
            seen += len(chunk)
            return reason

        await guard_body(self.app, scope, receive, send, check, status=400)


def _problem(decoder, chunk: bytes, seen: int, final: bool) -> str | None:
    nul = chunk.find(b"\x00")
    if nul >= 0:
        return not_utf8_message(seen + nul, "a NUL byte")
    try:
        decoder.decode(chunk, final)
    except UnicodeDecodeError as error:
        return not_utf8_message(seen + error.start, f"byte 0x{chunk[error.start]:02x}" if error.start < len(chunk)
                                else "a truncated character")
    return None
