"""What a 422 echoes of the request: bounded and always encodable.

A validation error echoes the input it refused. That input is the client's: it may hold text
UTF-8 cannot encode, NaN, bytes, an exception object in ``ctx``, or megabytes. Each echoed value
is cleaned and cut here, and a body lists at most ``MAX_ERRORS`` errors, so the handler can
neither fail on what it echoes nor spend long writing it.
"""

from __future__ import annotations

import math
from typing import Any

from api.text_safety import clean_text

MAX_ERRORS = 20
MAX_ECHO_CHARS = 200
MAX_MESSAGE_CHARS = 1000
MAX_ECHO_ITEMS = 10
MAX_ECHO_DEPTH = 4
ELLIPSIS = "…"


def _cut(text: str, limit: int) -> str:
    text = clean_text(text)
    return text if len(text) <= limit else text[:limit] + f"{ELLIPSIS} ({len(text)} characters)"


def echo(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON can carry it: strings cleaned and cut, containers cut to their first items,
    NaN and infinities as strings, anything else as its (cut) text."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return _cut(value, MAX_ECHO_CHARS)
    if depth >= MAX_ECHO_DEPTH:
        return ELLIPSIS
    if isinstance(value, dict):
        items = list(zip(range(MAX_ECHO_ITEMS), value.items()))
        out = {_cut(str(key), MAX_ECHO_CHARS): echo(item, depth + 1) for _, (key, item) in items}
        if len(value) > MAX_ECHO_ITEMS:
            out[ELLIPSIS] = f"{len(value) - MAX_ECHO_ITEMS} more keys"
        return out
    if isinstance(value, (list, tuple)):
        out_list = [echo(item, depth + 1) for item in value[:MAX_ECHO_ITEMS]]
        if len(value) > MAX_ECHO_ITEMS:
            out_list.append(f"{ELLIPSIS} {len(value) - MAX_ECHO_ITEMS} more items")
        return out_list
    if isinstance(value, (bytes, bytearray)):
        return _cut(bytes(value[: MAX_ECHO_CHARS * 4]).decode("utf-8", "replace"), MAX_ECHO_CHARS)
    return _cut(str(value), MAX_ECHO_CHARS)


def bounded_error(error: dict) -> dict:
    """One error in FastAPI's shape (type, loc, msg, input, ctx) with every part bounded."""
    out: dict[str, Any] = {
        "type": _cut(str(error.get("type", "value_error")), MAX_ECHO_CHARS),
        "loc": [part if isinstance(part, int) else _cut(str(part), MAX_ECHO_CHARS)
                for part in list(error.get("loc") or [])[:MAX_ECHO_ITEMS]],
        "msg": _cut(str(error.get("msg", "")), MAX_MESSAGE_CHARS),
    }
    if "input" in error:
        out["input"] = echo(error["input"])
    ctx = error.get("ctx")
    if isinstance(ctx, dict) and ctx:
        out["ctx"] = echo(ctx)
    return out


def more_errors(count: int) -> dict:
    """The entry that stands for the errors left out of a body."""
    return {
        "type": "too_many_errors",
        "loc": ["body"],
        "msg": f"{count} more errors not listed (a response lists the first {MAX_ERRORS}): fix these and retry",
    }
