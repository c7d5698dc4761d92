"""Knob settings that people wrote into the notebook ("try BT=32, num_warps=8")."""

from __future__ import annotations

import re
from typing import Any, Iterable

from kernels.knob_space import KnobSpace

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


# What the API checks: a ``name=value`` written in a hint must set a knob to one of its values.
_SETTING = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([A-Za-z0-9_.+\-]+)")


def _values(space: KnobSpace, knob: str) -> str:
    return ", ".join(str(value) for value in space.space[knob])


def knob_list(space: KnobSpace) -> str:
    """``chunk (16, 32, 64); …``: every knob with its allowed values, for error messages."""
    return "; ".join(f"{knob} ({_values(space, knob)})" for knob in space.knobs)


def check_hint(space: KnobSpace, text: str) -> tuple[dict[str, Any], list[str]]:
    """(knob settings the hint makes, why it is refused). Every ``name=value`` in the text must
    name a knob of the space (case-insensitively) and one of its values; text without any
    ``name=value`` is free text (no settings, no errors)."""
    settings: dict[str, Any] = {}
    errors: list[str] = []
    for name, raw in _SETTING.findall(text or ""):
        raw = raw.rstrip(".")
        knob = _knob_named(space, name)
        if knob is None:
            errors.append(f"{name!r} is not a knob; the knobs are: {knob_list(space)}")
            continue
        found, value = space.match_value(knob, raw)
        if not found:
            errors.append(f"{knob}={raw} is not allowed: {knob} takes one of {_values(space, knob)}")
            continue
        settings[knob] = value
    return settings, errors
