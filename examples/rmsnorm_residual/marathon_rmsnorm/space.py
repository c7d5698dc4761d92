"""The knobs of the seed kernel, and a renderer from a point to a candidate source.

A point is a dict with exactly the keys of ``kernel.CONFIG``; ``render`` returns ``kernel.py``
with its ``CONFIG`` literal replaced: a standalone candidate defining ``kernel(x, residual, weight)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernels.config_source import describe_point, knob_problems, read_config, render_point

_KERNEL_PATH = Path(__file__).with_name("kernel.py")

SPACE: dict[str, tuple[Any, ...]] = {
    "block_d": (64, 128, 256, 512, 1024, 2048),
    "num_warps": (1, 2, 4, 8, 16),
}

# One line per knob (GET /problems lists these with SPACE and DEFAULT).
KNOBS: dict[str, str] = {
    "block_d": "columns each program reads per step of its two passes over a row",
    "num_warps": "warps per program (one program per row)",
}

DEFAULT: dict[str, Any] = read_config(_KERNEL_PATH.read_text(), "kernel.py")


def validate(point: dict[str, Any]) -> list[str]:
    """Reasons the point is not a valid configuration; empty when it is."""
    problems = knob_problems(point, SPACE)
    if not problems and point["block_d"] < 32 * point["num_warps"]:
        problems.append(f"block_d={point['block_d']} leaves warps idle: it must be at least 32 x num_warps "
                        f"({32 * point['num_warps']})")
    return problems


def describe(point: dict[str, Any]) -> str:
    """One line in the knobs' own names (what a hint uses), e.g. ``block_d=256 num_warps=4``."""
    return describe_point(point, SPACE)


def render(point: dict[str, Any]) -> str:
    """kernel.py with CONFIG set to ``point``; raises ValueError for an invalid point."""
    return render_point("rmsnorm-residual", _KERNEL_PATH, point, SPACE, validate)
