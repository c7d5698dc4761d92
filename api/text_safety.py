"""Text the API can store and echo: a check for what comes in, a cleaner for what goes out.

JSON allows a lone surrogate (``"\\ud800"``); Python decodes it into a ``str`` that cannot be
encoded as UTF-8, so a response holding it fails to serialise, and a row holding it would fail
every read that includes the row. A NUL character is refused by PostgreSQL's text and JSON
columns. Requests are checked at the boundary (``unstorable``); responses and pages are cleaned
(``clean``), so a row written before the check existed, or text a worker produced, can never
deny a list, a run or its page to anyone.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from pydantic import BaseModel, model_validator

# A lone surrogate (U+D800 to U+DFFF) is the only thing a Python str can hold that UTF-8 cannot encode.
_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"
# Deep enough for any response model; beyond it values are returned as they are.
_MAX_DEPTH = 64


def unstorable(text: str) -> Optional[str]:
    """Why ``text`` cannot be stored and echoed (a lone surrogate, a NUL), in words; None when it can."""
    found = _SURROGATE.search(text)
    if found is not None:
        return (
            f"contains a lone surrogate U+{ord(found.group()):04X} at character {found.start()}, which is not "
            "text (it cannot be encoded as UTF-8): send the character itself or a valid surrogate pair"
        )
    position = text.find("\x00")
    if position >= 0:
        return f"contains a NUL character (U+0000) at character {position}, which the store cannot keep: remove it"
    return None


def first_unstorable(value: Any, depth: int = 0) -> Optional[str]:
    """The reason the first unstorable string in ``value`` (a str, or lists and dicts of them) is refused."""
    if isinstance(value, str):
        return unstorable(value)
    if depth >= _MAX_DEPTH:
        return None
    if isinstance(value, dict):
        items = [*value.keys(), *value.values()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        return None
    for item in items:
        reason = first_unstorable(item, depth + 1)
        if reason is not None:
            return reason
    return None


def clean_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD: always encodable as UTF-8."""
    return _SURROGATE.sub(REPLACEMENT, text) if _SURROGATE.search(text) else text


def clean(value: Any, depth: int = 0) -> Any:
    """``value`` with every string in it (dict keys too) cleaned; other values as they are."""
    if isinstance(value, str):
        return clean_text(value)
    if depth >= _MAX_DEPTH:
        return value
    if isinstance(value, dict):
        return {clean(key, depth + 1): clean(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [clean(item, depth + 1) for item in value]
    if isinstance(value, tuple):
        return tuple(clean(item, depth + 1) for item in value)
    return value


class Public(BaseModel):
    """A response body: every string it is built from is cleaned first, so serialising it cannot fail
    on text a row held before requests were checked."""

    @model_validator(mode="before")
    @classmethod
    def _clean_text(cls, data: Any) -> Any:
        return clean(data)
