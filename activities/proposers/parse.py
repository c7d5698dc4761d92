"""Turning an LLM reply into a candidate source, or into the reason it is not one."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Optional

_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+.\-]*)[^\n]*\n(.*?)^[ \t]*```", re.S | re.M)
_DEFINES_KERNEL = re.compile(r"^\s*(?:async\s+)?def\s+kernel\s*\(", re.M)
_STRATEGY_LINE = re.compile(r"^[\s>*_#-]*strategy[\s*_]*:\s*(.+?)\s*$", re.I | re.M)
_PYTHON_TAGS = {"", "python", "py", "python3"}
STRATEGY_LIMIT = 300


@dataclass(frozen=True)
class ParsedReply:
    source: Optional[str]
    strategy: str
    error: Optional[str] = None


def _strategy(prose: str) -> str:
    match = _STRATEGY_LINE.search(prose)
    if match:
        line = match.group(1)
    else:
        lines = [ln.strip(" \t#*>-_") for ln in prose.splitlines()]
        line = next((ln for ln in lines if ln), "")
    line = line.strip().strip("*_`").strip()
    return line[:STRATEGY_LIMIT] or "LLM proposal (no strategy given)"


def parse_reply(text: str) -> ParsedReply:
    """The reply's kernel: the last fenced Python block that defines ``kernel(...)``.

    A reply without such a block, or whose block is not valid Python, gives ``source=None``
    and an ``error`` saying which, so the loop can record a failed attempt with that message.
    """
    text = text or ""
    blocks = [(tag.lower(), body) for tag, body in _FENCE.findall(text)]
    prose = _FENCE.sub("", text)
    strategy = _strategy(prose)
    if not text.strip():
        return ParsedReply(None, strategy, "the reply was empty")
    python_blocks = [body for tag, body in blocks if tag in _PYTHON_TAGS]
    if not python_blocks:
        unclosed = text.count("```") % 2 == 1
        reason = "its code block is not closed (cut off?)" if unclosed else "it has no fenced ```python code block"
        return ParsedReply(None, strategy, f"the reply holds no kernel: {reason}")
    with_kernel = [body for body in python_blocks if _DEFINES_KERNEL.search(body)]
    if not with_kernel:
        return ParsedReply(None, strategy, "the reply's code block does not define kernel(**inputs)")
    source = with_kernel[-1].rstrip() + "\n"
    try:
        ast.parse(source)
    except SyntaxError as error:
        return ParsedReply(
            None, strategy, f"the reply's code block is not valid Python: line {error.lineno}: {error.msg}"
        )
    return ParsedReply(source, strategy)
