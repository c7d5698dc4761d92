"""What a person wants to know about a run in progress, from the API's run object (a dict, as
``GET /runs/{id}`` returns it): elapsed time and an estimate of the time left from the budget,
the current iteration's candidates, and whether it waits for a GPU worker. Shared by the CLI
(``show``, ``watch``, ``runs``) and the run page; no heavy imports."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Optional

from workflows.types import FINISHED_RUN_STATUSES


def duration(seconds: Optional[float]) -> str:
    """``45s``, ``12m05s``, ``3h07m``; ``-`` when unknown."""
    if seconds is None or seconds < 0:
        return "-"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _parse_time(value: Any) -> Optional[datetime]:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def elapsed_s(run: dict[str, Any], now: Optional[datetime] = None) -> Optional[float]:
    """Wall time since the run was created: until now while it goes on (paused time included),
    until its last update once it has ended. None when the creation time is unknown."""
    created = _parse_time(run.get("created_at"))
    if created is None:
        return None
    if run.get("status") in FINISHED_RUN_STATUSES:
        end = _parse_time(run.get("updated_at")) or created
    else:
        end = now or datetime.now(timezone.utc)
    return max(0.0, (end - created).total_seconds())


def iterations_done_here(run: dict[str, Any]) -> int:
    """Iterations this run has done itself: a continued run numbers on from its parent's count
    (``start_iteration``), which it did not spend time on."""
    return max(0, int(run.get("iteration") or 0) - int(run.get("start_iteration") or 0))


def estimate_left_s(run: dict[str, Any], elapsed: Optional[float]) -> tuple[Optional[float], str]:
    """An estimate of the time left and the budget it comes from, from this run's own measured
    pace: the iterations left at the pace so far, or the hours left if those end first. (None, "")
    until this run has finished an iteration (no pace yet) or once it has ended."""
    if run.get("status") in FINISHED_RUN_STATUSES or elapsed is None:
        return None, ""
    budget = run.get("budget") if isinstance(run.get("budget"), dict) else {}
    total, done = budget.get("iterations"), iterations_done_here(run)
    if not (isinstance(total, (int, float)) and total > 0 and done > 0):
        return None, ""
    remaining = max(0.0, total - int(run.get("iteration") or 0))
    options = [(elapsed / done * remaining, f"{total:g} iterations at {duration(elapsed / done)} each")]
    hours = budget.get("hours")
    if isinstance(hours, (int, float)) and hours > 0:
        options.append((max(0.0, hours * 3600 - elapsed), f"{hours:g} h"))
    return min(options)


def time_line(run: dict[str, Any], now: Optional[datetime] = None) -> str:
    """``elapsed 12m05s, about 40m left (budget 20 iterations at 2m01s each)``; "" when nothing is known."""
    elapsed = elapsed_s(run, now)
    if elapsed is None:
        return ""
    left, source = estimate_left_s(run, elapsed)
    text = f"elapsed {duration(elapsed)}"
    if left is not None:
        text += f", about {duration(left)} left (budget {source})"
    return text


def candidates_line(run: dict[str, Any]) -> str:
    """``iteration 4: #0 ok, #1 confirming; iteration 5: #0 evaluating, #1 queued (40 s)``: the
    candidates of every open iteration, grouped by iteration; "" without candidates."""
    rows = run.get("candidates")
    if not isinstance(rows, list) or not rows:
        return ""
    groups: dict[Any, list[str]] = {}
    for row in rows:
        if isinstance(row, dict):
            # The steady loop shows several iterations at once; older rows carry none.
            iteration = row.get("iteration") or run.get("candidates_iteration")
            groups.setdefault(iteration, []).append(f"#{row.get('index', '?')} {row.get('state', '?')}")
    return "; ".join(f"{f'iteration {iteration}' if iteration else 'candidates'}: " + ", ".join(parts)
                     for iteration, parts in groups.items())


def percent(fraction: Any) -> str:
    """``37%``, or ``—`` when unmeasured (CPU workers): how the page and the CLI write a fraction."""
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or fraction != fraction:
        return "—"
    return f"{fraction * 100:.0f}%"


def gpu_line(run: dict[str, Any]) -> str:
    """``GPU busy 62%, timing 18% of 12m05s of evaluation`` (``store/busy.py`` says how they are
    counted); ``Timing 24% of 43s of evaluation`` where no GPU busy meter ran (CPU workers); ""
    when no evaluation of the run was measured."""
    seconds = run.get("evaluation_gpu_s")
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not seconds > 0:
        return ""
    timing = f"timing {percent(run.get('timing_fraction'))} of {duration(seconds)} of evaluation"
    busy = run.get("gpu_busy_fraction")
    if not isinstance(busy, (int, float)) or isinstance(busy, bool):
        # No GPU busy meter ran (CPU workers, or a GPU without NVML): say nothing of a GPU.
        return timing[0].upper() + timing[1:]
    return f"GPU busy {percent(busy)}, {timing}"


# What each stop reason of ``workflows.rules.STOP_REASONS`` means, in words.
REASON_WORDS = {
    "stopped": "stopped on request (marathon stop)",
    "goal_reached": "the goal was reached",
    "budget_iterations": "its iteration budget was spent",
    "budget_hours": "its time budget was spent",
    "budget_gpu_seconds": "its evaluation-seconds budget was spent",
    "budget_tokens": "its LLM token budget was spent",
    "plateau": "no better kernel for its plateau budget of iterations",
}


def reason_words(reason: str) -> str:
    """``its iteration budget was spent (budget_iterations)``; any other reason as it is."""
    words = REASON_WORDS.get(reason)
    return f"{words} ({reason})" if words else reason


def reason_label(status: Any) -> str:
    """What a run's ``stop_reason`` is for its status: why it ended, failed or is paused."""
    return {"paused": "paused because", "failed": "failed because"}.get(str(status), "ended because")


def progress_details(run: dict[str, Any], now: Optional[datetime] = None) -> list[str]:
    """The lines below a run's status: time, candidates, a wait for a worker, a failing proposer."""
    lines = [time_line(run, now), candidates_line(run)]
    if run.get("waiting_for_worker"):
        lines.append(str(run["waiting_for_worker"]))
    if run.get("proposer_failing"):
        lines.append(str(run["proposer_failing"]))
    if run.get("waiting_for"):  # a queue no worker polls at all
        lines.append(f"waiting for: {run['waiting_for']}")
    return [line for line in lines if line]
