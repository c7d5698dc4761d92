"""How the client commands show a run: the lines of ``marathon show``, the one-line progress bar of
``watch`` and ``run --wait``, and the small formats they share (speedup, goal, budget)."""

from __future__ import annotations

import sys
import time
from typing import Any, Optional

from api.progress import candidates_line, gpu_line, time_line
from workflows.types import FINISHED_RUN_STATUSES, Goal

LINKS = (("run page", "run_page_url"), ("Temporal UI", "temporal_url"))


def format_speedup(value: Optional[float], timing_kind: Optional[str] = None) -> str:
    if value is None:
        return "-"
    text = f"{value:.3g}x"
    if timing_kind and timing_kind != "gpu":
        text += f" ({timing_kind} timing)"
    return text


def goal_text(goal: Any) -> str:
    """The goal as the API returned it, written by ``Goal.format_target``; what is not a goal, as it is."""
    if isinstance(goal, dict):
        target = goal.get("target")
        if isinstance(target, (int, float)) and not isinstance(target, bool):
            return Goal(objective=str(goal.get("objective", "speedup")), target=float(target)).format_target()
        return str(target)
    return "-" if goal is None else str(goal)


def timing_kind(run: dict[str, Any]) -> Optional[str]:
    best = run.get("best")
    if isinstance(best, dict) and best.get("timing_kind"):
        return best["timing_kind"]
    return run.get("timing_kind")


def iterations_budget(run: dict[str, Any]) -> Optional[int]:
    budget = run.get("budget")
    return budget.get("iterations") if isinstance(budget, dict) else None


def link_lines(run: dict[str, Any]) -> list[str]:
    """``run page`` and ``Temporal UI``, each with its address, for those the API gave."""
    return [f"  {label:12} {run[key]}" for label, key in LINKS if run.get(key)]


def describe_run(run: dict[str, Any]) -> list[str]:
    iterations = iterations_budget(run)
    lines = [
        f"run {run.get('id')}  {run.get('problem')}  {run.get('status')}",
    ]
    if run.get("phase"):
        lines.append(f"  phase        {run['phase']}")
    if run.get("from_run"):
        lines.append(f"  {'continues' if run.get('from_kind') == 'continue' else 'forked from':12} {run['from_run']}")
    lines += [
        f"  iteration    {run.get('iteration', 0)}" + (f" of {iterations}" if iterations else ""),
        f"  best         {format_speedup(run.get('best_speedup'), timing_kind(run))}",
        f"  goal         {goal_text(run.get('goal'))}",
    ]
    if run.get("distance") is not None:
        lines.append(f"  distance     {run['distance']:.3f} (fraction of the goal still missing)")
    used = run.get("budget_used")
    if isinstance(used, dict) and used:
        lines.append(
            "  budget used  "
            + ", ".join(
                f"{key} {value:g}" if isinstance(value, (int, float)) else f"{key} {value}"
                for key, value in used.items()
            )
        )
    if time_line(run):
        lines.append(f"  time         {time_line(run)}")
    if candidates_line(run):
        lines.append(f"  candidates   {candidates_line(run)}")
    if gpu_line(run):
        lines.append(f"  gpu          {gpu_line(run)}")
    if run.get("waiting_for_worker"):
        lines.append(f"  WAITING      {run['waiting_for_worker']}")
    if run.get("stop_reason"):
        label = {"paused": "paused", "failed": "failed"}.get(run.get("status"), "stop reason")
        lines.append(f"  {label:12} {run['stop_reason']}")
    if run.get("waiting_for"):
        lines.append(f"  waiting for  {run['waiting_for']}")
    return lines + link_lines(run)


def best_attempt(run: dict[str, Any], attempts: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The attempt that holds the run's best kernel, if it is among ``attempts``."""
    for attempt in attempts:
        if run.get("best_attempt_id") is not None and attempt.get("id") == run["best_attempt_id"]:
            return attempt
    best = [attempt for attempt in attempts if attempt.get("is_best")]
    return best[-1] if best else None


def _candidate_counts(run: dict[str, Any]) -> str:
    """``candidates 2 ok, 1 evaluating``: the current iteration's candidates by state."""
    rows = run.get("candidates")
    if not isinstance(rows, list) or not rows:
        return ""
    counts: dict[str, int] = {}
    for row in rows:
        state = str(row.get("state", "?")) if isinstance(row, dict) else "?"
        state = "waiting for a GPU worker" if state.startswith("waiting for a GPU worker") else state
        counts[state] = counts.get(state, 0) + 1
    return "candidates " + ", ".join(f"{count} {state}" for state, count in counts.items())


def progress_line(run: dict[str, Any], width: int = 24, *, with_time: bool = True) -> str:
    """One line on a run: the bar, best, goal, status (phase), then what is known of time left,
    the candidates in flight and a wait for a worker."""
    iteration = int(run.get("iteration") or 0)
    total = iterations_budget(run)
    if total:
        filled = min(width, int(width * iteration / total))
        bar = "[" + "#" * filled + "-" * (width - filled) + f"] {iteration}/{total}"
    else:
        bar = f"iteration {iteration}"
    line = (
        f"{bar}  best {format_speedup(run.get('best_speedup'), timing_kind(run))}"
        f"  goal {goal_text(run.get('goal'))}  {run.get('status', '?')}"
    )
    if run.get("phase") and run.get("phase") != run.get("status"):
        line += f" ({run['phase']})"
    extras = [time_line(run) if with_time else "", _candidate_counts(run)]
    if run.get("waiting_for_worker"):
        extras.append(str(run["waiting_for_worker"]))
    return "  ".join([line] + [extra for extra in extras if extra])


def follow(client, run_id: str, *, interval: float, out=None) -> int:
    """Poll the run until it ends; a live line on a terminal, one line per change otherwise."""
    out = out or sys.stdout
    live = out.isatty()
    last = None
    try:
        while True:
            run = client.get_run(run_id)
            line = progress_line(run)
            # A pipe gets a line when something other than the clock changed.
            key = progress_line(run, with_time=False)
            if live:
                out.write("\r\033[K" + line)
                out.flush()
            elif key != last:
                print(line, file=out, flush=True)
            last = key
            status = run.get("status")
            if status in FINISHED_RUN_STATUSES:
                if live:
                    out.write("\n")
                reason = f" ({run['stop_reason']})" if run.get("stop_reason") else ""
                print(f"run {run_id} {status}{reason}", file=out, flush=True)
                return 1 if status == "failed" else 0
            time.sleep(interval)
    except Exception:
        # A poll that fails (the API went away) must not leave the error message glued to the
        # end of the live bar: close the bar's line first. (Ctrl-C is not an Exception; its
        # handlers start their own line.)
        if live and last is not None:
            out.write("\n")
            out.flush()
        raise
