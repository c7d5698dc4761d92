"""Values as the run page writes them: escaped text, durations in a readable unit, and the
per-shape times a judge report holds."""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass
from typing import Any, Optional


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def format_ms(ms: Optional[float]) -> str:
    """A duration in milliseconds, in the unit a person reads best (µs below 1 ms, s above 1000 ms)."""
    if ms is None or not isinstance(ms, (int, float)) or not math.isfinite(ms):
        return "-"
    if ms < 1.0:
        return f"{ms * 1000:.3g} µs"
    if ms >= 1000.0:
        return f"{ms / 1000:.3g} s"
    return f"{ms:.3g} ms"


def ratio(value: Optional[float]) -> str:
    """A speedup with three significant figures, as small as it is: ``1.32×``, ``0.00192×``; "" for none."""
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return ""
    return f"{value:.3g}×"


def baseline_name(report: Any) -> str:
    """The baseline a stored judge report timed against (``eager``, ``torch.compile``, ...); "" if unknown."""
    return str(report.get("baseline") or "") if isinstance(report, dict) else ""


def _shape_order(shape: str) -> list:
    """Natural order: ``B=2, T=64`` before ``B=2, T=128``; the same order on every row."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", shape)]


@dataclass
class ShapeTime:
    """One shape's median times from the judge's report: ours and the baseline's."""

    shape: str
    ours_ms: Optional[float]
    baseline_ms: Optional[float]

    def text(self) -> str:
        return f"{self.shape}: {format_ms(self.ours_ms)} vs {format_ms(self.baseline_ms)}"


def shape_times(report: Any) -> list[ShapeTime]:
    """``shapes[i].timing.candidate/baseline.median_ms`` of a stored judge report (dict); [] when absent."""
    if not isinstance(report, dict):
        return []
    out = []
    for item in report.get("shapes") or []:
        if not isinstance(item, dict):
            continue
        timing = item.get("timing")
        if not isinstance(timing, dict):
            continue

        def median(side: str) -> Optional[float]:
            value = (timing.get(side) or {}).get("median_ms") if isinstance(timing.get(side), dict) else None
            return float(value) if isinstance(value, (int, float)) else None

        ours, base = median("candidate"), median("baseline")
        if ours is None and base is None:
            continue
        out.append(ShapeTime(str(item.get("shape") or item.get("dims") or f"shape {len(out)}"), ours, base))
    return sorted(out, key=lambda time: _shape_order(time.shape))
