"""The run page's speedup plot: one inline SVG, no script (the page's Content-Security-Policy
forbids scripts), a log-scale y axis with the 1x and goal lines, hover titles on every dot."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

from api.page_values import ShapeTime, esc

PLOT_WIDTH, PLOT_HEIGHT = 760, 300
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 56, 64, 16, 40
MAX_X_TICKS = 12
# The y axis spans at most this range: a stored value beyond it (a goal target of 1e308, a speedup
# of inf) is drawn at the edge, its true value in its hover text, instead of overflowing the axis.
Y_FLOOR, Y_CEILING = 1e-6, 1e6


def _on_axis(value: float) -> float:
    return min(max(value, Y_FLOOR), Y_CEILING)


def _drawable(value: Optional[float]) -> bool:
    return value is not None and math.isfinite(value) and value > 0


@dataclass
class PlotPoint:
    iteration: int
    index: int
    status: str
    speedup: Optional[float]
    # Became the run's best after its paired confirmation: the best-so-far line steps only here.
    is_best: bool = False
    # A challenger whose confirmation did not hold up: its figure is a first, unconfirmed timing.
    not_confirmed: bool = False
    times: list[ShapeTime] = field(default_factory=list)


def _line(css_class: str, x1: float, x2: float, y1: float, y2: float) -> str:
    return f'<line class="{css_class}" x1="{x1:.1f}" x2="{x2:.1f}" y1="{y1:.1f}" y2="{y2:.1f}"/>'


def log_ticks(low: float, high: float) -> list[float]:
    """1-2-5 values between ``low`` and ``high`` (a log axis); only the decades when that is too many."""
    values = []
    for exponent in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1):
        for mantissa in (1, 2, 5):
            value = mantissa * 10.0**exponent
            if low <= value <= high:
                values.append(value)
    if len(values) > 9:
        values = [v for v in values if math.isclose(10 ** round(math.log10(v)), v)]
    return values


def integer_ticks(low: int, high: int, most: int = MAX_X_TICKS) -> list[int]:
    """Distinct integers from ``low`` to ``high``, every 1, 2, 5, 10, 20, … so that at most ``most`` show."""
    span = max(1, high - low)
    steps = (m * 10**e for e in range(len(str(span)) + 1) for m in (1, 2, 5))
    step = next(s for s in steps if span // s + 1 <= most)
    first = -(-low // step) * step
    return list(range(first, high + 1, step))


def _format_speedup(value: float) -> str:
    return f"{value:g}x"


def _point_title(point: PlotPoint) -> str:
    head = f"iteration {point.iteration}, candidate {point.index}: "
    if point.speedup is None:
        return head + point.status
    mark = ", the run's best (confirmed)" if point.is_best else ", not confirmed" if point.not_confirmed else ""
    text = head + f"{point.speedup:.3g}x ({point.status}{mark})"
    if point.times:
        text += "; " + "; ".join(t.text() for t in point.times[:4])
    return text


def _attempt_marks(points: Sequence[PlotPoint], x, y, bottom: float, x_high: float) -> list[str]:
    """One dot per attempt (failures on the ``bottom`` edge) and the step line of the confirmed
    best so far, drawn with the plot's ``x(iteration)`` and ``y(speedup)`` scales."""
    parts: list[str] = []
    best: Optional[float] = None
    steps: list[str] = []
    for point in points:
        if point.speedup is None or point.speedup <= 0:
            parts.append(
                f'<circle class="failed" cx="{x(point.iteration):.1f}" cy="{bottom:.1f}" r="3">'
                f"<title>{esc(_point_title(point))}</title></circle>"
            )
            continue
        css = "attempt unconfirmed" if point.not_confirmed else "attempt"
        parts.append(
            f'<circle class="{css}" cx="{x(point.iteration):.1f}" cy="{y(point.speedup):.1f}" r="4">'
            f"<title>{esc(_point_title(point))}</title></circle>"
        )
        # The line follows the confirmed best only, never a first timing that did not hold up.
        if point.is_best and (best is None or point.speedup > best):
            if best is not None:
                steps.append(f"{x(point.iteration):.1f},{y(best):.1f}")
            best = point.speedup
            steps.append(f"{x(point.iteration):.1f},{y(best):.1f}")
    if best is not None:
        steps.append(f"{x(x_high):.1f},{y(best):.1f}")
        parts.append(f'<polyline class="best-line" points="{" ".join(steps)}">'
                     "<title>best so far (confirmed)</title></polyline>")
    return parts


def speedup_svg(points: Sequence[PlotPoint], goal_target: Optional[float]) -> str:
    """Speedup of every attempt (dots; failures as red dots on the bottom edge, unconfirmed
    figures hollow) and the confirmed best so far (a step line), on a log-scale y axis with the
    1x and goal lines; hovering a dot shows its values."""
    scored = [p.speedup for p in points if p.speedup is not None and p.speedup > 0]
    iterations = [p.iteration for p in points] or [0]
    x_low, x_high = min(iterations), max(max(iterations), min(iterations) + 1)
    if not _drawable(goal_target):
        goal_target = None
    marks = [_on_axis(v) for v in scored + [1.0] + ([goal_target] if goal_target else [])]
    y_low, y_high = min(marks) / 1.4, max(marks) * 1.4
    log_low, log_high = math.log10(y_low), math.log10(y_high)
    inner_w = PLOT_WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    inner_h = PLOT_HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    right = PLOT_WIDTH - MARGIN_RIGHT

    def x(iteration: float) -> float:
        return MARGIN_LEFT + (iteration - x_low) / (x_high - x_low) * inner_w

    def y(speedup: float) -> float:
        value = math.log10(min(max(speedup, y_low), y_high)) if not math.isnan(speedup) else log_low
        return MARGIN_TOP + inner_h - (value - log_low) / (log_high - log_low) * inner_h

    parts = [
        f'<svg id="speedup-plot" xmlns="http://www.w3.org/2000/svg" width="{PLOT_WIDTH}" height="{PLOT_HEIGHT}" '
        f'viewBox="0 0 {PLOT_WIDTH} {PLOT_HEIGHT}" role="img" aria-label="speedup over iterations (log scale)" '
        'data-y-scale="log">',
        "<title>Speedup over iterations (log scale)</title>",
    ]
    y_ticks = log_ticks(y_low, y_high)
    for value in y_ticks:
        parts.append(_line("grid", MARGIN_LEFT, right, y(value), y(value)))
        parts.append(
            f'<text class="y-tick" x="{MARGIN_LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end">'
            f"{_format_speedup(value)}</text>"
        )
    parts.append(_line("axis", MARGIN_LEFT, right, MARGIN_TOP + inner_h, MARGIN_TOP + inner_h))
    parts.append(_line("axis", MARGIN_LEFT, MARGIN_LEFT, MARGIN_TOP, MARGIN_TOP + inner_h))
    for value in integer_ticks(x_low, x_high):
        parts.append(
            f'<text class="x-tick" x="{x(value):.1f}" y="{PLOT_HEIGHT - 22}" text-anchor="middle">{value}</text>'
        )
    parts.append(
        f'<text x="{MARGIN_LEFT + inner_w / 2:.1f}" y="{PLOT_HEIGHT - 4}" text-anchor="middle">iteration</text>'
    )
    parts.append(
        f'<line class="baseline-line" x1="{MARGIN_LEFT}" x2="{right}" y1="{y(1.0):.1f}" y2="{y(1.0):.1f}">'
        "<title>1x: the baseline</title></line>"
        f'<text class="baseline-label" x="{right + 4}" y="{y(1.0) + 4:.1f}">1x</text>'
    )
    if goal_target:
        parts.append(
            f'<line class="goal-line" x1="{MARGIN_LEFT}" x2="{right}" '
            f'y1="{y(goal_target):.1f}" y2="{y(goal_target):.1f}"><title>goal {goal_target:g}x</title></line>'
            f'<text class="goal-label" x="{right + 4}" y="{y(goal_target) + 4:.1f}">goal {goal_target:g}x</text>'
        )
    parts += _attempt_marks(points, x, y, MARGIN_TOP + inner_h, x_high)
    parts.append("</svg>")
    return "".join(parts)
