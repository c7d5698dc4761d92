"""A problem's search space module seen through one small class.

A space module (``kernels/<problem>/space.py``) holds ``SPACE`` (knob -> tuple of values, in
an order where neighbours are similar, e.g. growing tile sizes), ``DEFAULT`` (our kernel's
own point), ``validate(point) -> list[str]`` (why a point cannot be rendered),
``describe(point) -> str`` and ``render(point) -> str`` (the candidate's source text).
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any, Hashable, Optional

Point = dict[str, Any]


def _same_value(declared: Any, raw: Any) -> bool:
    if isinstance(raw, str):
        return str(declared).strip().lower() == raw.strip().lower()
    # JSON round-trips keep ints and bools, but True == 1 in Python: keep them apart.
    if isinstance(declared, bool) != isinstance(raw, bool):
        return False
    return declared == raw


class KnobSpace:
    def __init__(self, module: ModuleType):
        missing = [name for name in ("SPACE", "DEFAULT", "render") if not hasattr(module, name)]
        if missing:
            raise ValueError(f"space module {module.__name__} lacks {', '.join(missing)}")
        self.module = module
        self.space: dict[str, tuple[Any, ...]] = {k: tuple(v) for k, v in module.SPACE.items()}
        empty = [k for k, values in self.space.items() if not values]
        if empty:
            raise ValueError(f"space module {module.__name__} has knobs without values: {empty}")
        self.knobs = list(self.space)
        default = self.normalize(dict(module.DEFAULT))
        if default is None:
            raise ValueError(f"DEFAULT of {module.__name__} is outside its SPACE: {module.DEFAULT!r}")
        self.default = default

    def size(self) -> int:
        return math.prod(len(values) for values in self.space.values())

    def key(self, point: Point) -> Hashable:
        return tuple(point[k] for k in self.knobs)

    def match_value(self, knob: str, raw: Any) -> tuple[bool, Any]:
        """(found, declared value) for a value written elsewhere (JSON, a hint)."""
        for value in self.space.get(knob, ()):
            if _same_value(value, raw):
                return True, value
        return False, None

    def normalize(self, raw: Optional[dict[str, Any]]) -> Optional[Point]:
        """The point ``raw`` names, with missing knobs at their defaults and unknown knobs
        dropped; None when a value is not in the space (the space changed since)."""
        if raw is None:
            return None
        base = getattr(self, "default", None) or {}
        point: Point = {}
        for knob in self.knobs:
            if knob not in raw:
                if knob not in base:
                    return None
                point[knob] = base[knob]
                continue
            found, value = self.match_value(knob, raw[knob])
            if not found:
                return None
            point[knob] = value
        return point

    def problems(self, point: Point) -> list[str]:
        validate = getattr(self.module, "validate", None)
        return list(validate(dict(point))) if validate is not None else []

    def is_valid(self, point: Point) -> bool:
        return not self.problems(point)

    def describe(self, point: Point) -> str:
        describe = getattr(self.module, "describe", None)
        if describe is not None:
            return describe(dict(point))
        return ", ".join(f"{k}={point[k]}" for k in self.knobs)

    def render(self, point: Point) -> str:
        return self.module.render(dict(point))

    def neighbours(self, point: Point) -> list[Point]:
        """Points one step away along one knob (the adjacent values in declaration order)."""
        result = []
        for knob in self.knobs:
            values = self.space[knob]
            position = values.index(point[knob])
            for step in (-1, 1):
                if 0 <= position + step < len(values):
                    result.append({**point, knob: values[position + step]})
        return result
