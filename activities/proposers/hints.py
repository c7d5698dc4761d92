"""Knob settings that people wrote into the notebook ("try BT=32, num_warps=8")."""

from __future__ import annotations

import re
from typing import Any, Iterable

from activities.proposers.knob_space import KnobSpace

_ASSIGNMENT = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*[=:]\s*([A-Za-z0-9_.+\-]+)")


def _knob_named(space: KnobSpace, name: str) -> str | None:
    if name in space.space:
        return name
    folded = [k for k in space.knobs if k.lower() == name.lower()]
    return folded[0] if len(folded) == 1 else None


def knob_overrides(space: KnobSpace, texts: Iterable[str]) -> list[dict[str, Any]]:
    """One override per text that names at least one knob with a value of the space.

    Words that are not knobs, and values the space does not declare, are ignored: a hint
    is advice, not an order that could make the proposer fail.
    """
    overrides = []
    for text in texts:
        override: dict[str, Any] = {}
        for name, raw in _ASSIGNMENT.findall(text or ""):
            knob = _knob_named(space, name)
            if knob is None:
                continue
            found, value = space.match_value(knob, raw)
            if found:
                override[knob] = value
        if override:
            overrides.append(override)
    return overrides
