"""The search space of a problem, checked at many points, not only its DEFAULT.

The search proposer calls ``validate(point)`` and ``render(point)`` at points far from the
default; a space whose ``validate`` crashes there (a misspelt knob) passes a check of the
default alone and stops a run at its second iteration. So every point is checked where the
space has at most ``ALL_POINTS_UP_TO`` of them; a larger space is checked at DEFAULT, at every
single-knob change of it, and at random points (a seeded draw: the same points every time),
``SAMPLED_POINTS`` in all.

At each point ``validate`` must return a list of strings without raising; where it accepts
the point, ``render`` must return the source of a module defining ``kernel`` that compiles,
and ``describe`` (when given) must not raise. A failure that repeats is said once, with how
many points share it, one of them, and the last lines of its traceback.
"""

from __future__ import annotations

import itertools
import math
import random
import traceback
from typing import Any

ALL_POINTS_UP_TO = 512
SAMPLED_POINTS = 256
SAMPLE_SEED = 0
TRACEBACK_LINES = 3


def space_points(space_map: dict[str, tuple[Any, ...]], default: dict[str, Any]) -> list[dict[str, Any]]:
    """Every point of ``space_map`` when there are at most ``ALL_POINTS_UP_TO``; else DEFAULT,
    its single-knob neighbours and seeded random points, ``SAMPLED_POINTS`` at most."""
    knobs = list(space_map)
    total = math.prod(len(space_map[k]) for k in knobs)
    if total <= ALL_POINTS_UP_TO:
        return [dict(zip(knobs, values)) for values in itertools.product(*(space_map[k] for k in knobs))]
    points = [dict(default)]
    for knob in knobs:
        points += [{**default, knob: value} for value in space_map[knob] if value != default.get(knob)]
    rng = random.Random(SAMPLE_SEED)
    while len(points) < SAMPLED_POINTS:
        points.append({k: rng.choice(tuple(space_map[k])) for k in knobs})
    return points[:SAMPLED_POINTS]


def last_lines(error: BaseException) -> str:
    """The error and where it was raised: the last frames of its traceback, one line each."""
    frames = traceback.extract_tb(error.__traceback__)[-TRACEBACK_LINES:]
    where = " <- ".join(f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} in {frame.name}: "
                        f"{(frame.line or '').strip()}" for frame in reversed(frames))
    return f"{type(error).__name__}: {error} (at {where})" if where else f"{type(error).__name__}: {error}"


def _point_failure(space: Any, point: dict[str, Any]) -> str | None:
    """What is wrong at ``point``; None when nothing is (``validate`` may rule the point out)."""
    validate = getattr(space, "validate", None)
    try:
        reasons = validate(dict(point)) if validate is not None else []
    except Exception as error:
        return f"validate raised {last_lines(error)}"
    if not isinstance(reasons, (list, tuple)) or not all(isinstance(r, str) for r in reasons):
        return f"validate returned {type(reasons).__name__}; it must return a list of strings (why not)"
    if reasons:
        return None  # a point the space itself rules out: the proposer skips it
    try:
        source = space.render(dict(point))
    except Exception as error:
        return f"render raised {last_lines(error)}"
    if not isinstance(source, str) or "def kernel" not in source:
        return "render returned no source defining kernel(**inputs)"
    try:
        compile(source, "<render>", "exec")
    except SyntaxError as error:
        return f"render gave source that does not compile: {error}"
    describe = getattr(space, "describe", None)
    if describe is not None:
        try:
            describe(dict(point))
        except Exception as error:
            return f"describe raised {last_lines(error)}"
    return None


def check_points(space: Any) -> tuple[list[str], int, int]:
    """``(failures, points checked, points without a failure)`` for a space module holding
    ``SPACE`` and ``DEFAULT``. Failures are grouped: one line per distinct failure."""
    points = space_points(dict(space.SPACE), dict(space.DEFAULT))
    seen: dict[str, list[dict[str, Any]]] = {}
    accepted = 0
    for point in points:
        failure = _point_failure(space, point)
        if failure is None:
            accepted += 1
        else:
            seen.setdefault(failure, []).append(point)
    failures = [f"at {len(where)} of {len(points)} points, e.g. {where[0]}: {failure}"
                for failure, where in seen.items()]
    return failures, len(points), accepted
