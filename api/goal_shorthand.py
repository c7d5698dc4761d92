"""The goal shorthand's one rule, said twice: to the client that breaks it, and in the schema.

``{"speedup": 2.0}`` means ``{"objective": "speedup", "target": 2.0}``; it is one way to write the
objective and the target, so it goes with neither of them nor with the other shorthand.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

from workflows.types import OBJECTIVES

# The ceiling of a speedup target (the run page draws it on a log axis).
TARGET_MAX = 10_000.0
# A roofline target is a fraction (Goal.problems() refuses more); a goal's schema says so.
ROOFLINE_MAX = 1.0
ROOFLINE_RULE = {
    "if": {"properties": {"objective": {"const": "roofline"}}, "required": ["objective"]},
    "then": {"properties": {"target": {"maximum": ROOFLINE_MAX}}},
}

# The keys a shorthand stands for, and the shorthands themselves: no two of them together.
_EXCLUSIVE = ("objective", "target", *OBJECTIVES)


def shorthand_conflicts() -> dict[str, Any]:
    """The JSON schema of a goal that breaks the rule (a goal's schema says ``not`` this)."""
    pairs = [
        {"required": [first, second]}
        for first, second in combinations(_EXCLUSIVE, 2)
        if first in OBJECTIVES or second in OBJECTIVES
    ]
    return {"anyOf": pairs}


def refuse_mixed_shorthand(shorthand: list[str], data: dict) -> None:
    """Raise ValueError, in words, when a goal uses a shorthand together with what it stands for."""
    if data[shorthand[0]] is None:
        raise ValueError(f'the goal shorthand {{"{shorthand[0]}": x}} needs a number x, got null')
    clashing = [key for key in _EXCLUSIVE if key in data and key != shorthand[0]]
    if clashing:
        given = ", ".join(clashing)
        raise ValueError(
            f'the goal shorthand {{"{shorthand[0]}": x}} stands for objective and target: give either it alone '
            f"or objective and target, not it together with {given}"
        )


def goal_schema(schema: dict[str, Any]) -> None:
    """Show the shorthand keys the validator accepts (``{"speedup": 2.0}``) and its rule in the OpenAPI schema."""
    properties = schema.setdefault("properties", {})
    for name in OBJECTIVES:
        properties[name] = {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": ROOFLINE_MAX if name == "roofline" else TARGET_MAX,
            "title": name.capitalize(),
            "description": f'Shorthand: {{"{name}": x}} means {{"objective": "{name}", "target": x}} '
            "(not together with objective or target)",
        }
    schema["not"] = shorthand_conflicts()
    schema["allOf"] = [ROOFLINE_RULE]
    schema["examples"] = [
        {"speedup": 2.0}, {"objective": "roofline", "target": 0.6, "intent": "beat FLA at long contexts"}
    ]
