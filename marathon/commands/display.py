"""How the client commands show a run: the lines of ``marathon show``, the one-line progress bar of
``watch`` and ``run --wait``, and the small formats they share (speedup, goal, budget)."""

from __future__ import annotations

import re
import shutil
import sys
import time
from typing import Any, Optional

from api.progress import candidates_line, gpu_line, reason_label, reason_words, time_line
from workflows.types import FINISHED_RUN_STATUSES, Goal

LINKS = (("run page", "run_page_url"), ("Temporal UI", "temporal_url"))


def format_speedup(value: Optional[float], timing_kind: Optional[str] = None, baseline: str = "") -> str:
    """``0.172x vs eager (interpreter timing: CPU, noisy)``: three significant figures, the baseline
    where it is known, and a CPU timing said to be one."""
    if value is None:
        return "-"
    text = f"{value:.3g}x" + (f" vs {baseline}" if baseline else "")
    if timing_kind and timing_kind != "gpu":
        text += f" ({timing_kind} timing: CPU, noisy)"
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
        f"  best         {format_speedup(run.get('best_speedup'), timing_kind(run), run.get('baseline') or '')}",
        f"  goal         {goal_text(run.get('goal'))}",
    ]
    if run.get("distance") is not None:
        lines.append(f"  distance     {run['distance']:.3f} (fraction of the goal still missing)")
    used = run.get("budget_used")
    if isinstance(used, dict) and used:
        lines.append("  budget used  " + budget_used_text(used, timing_kind(run)))
    if time_line(run):
        lines.append(f"  time         {time_line(run)}")
    if candidates_line(run):
        lines.append(f"  candidates   {candidates_line(run)}")
    if gpu_line(run):
        label = "gpu" if timing_kind(run) == "gpu" else "evaluation"
        lines.append(f"  {label:12} {gpu_line(run)}")
    if run.get("waiting_for_worker"):
        waiting = str(run["waiting_for_worker"])
        lines.append(f"  {'queued' if waiting.startswith('queued') else 'WAITING':12} {waiting}")
    if run.get("proposer_failing"):
        lines.append(f"  {'PROPOSER':12} {run['proposer_failing']}")
    if run.get("stop_reason"):
        label = reason_label(run.get("status")).split()[0]
        lines.append(f"  {label:12} {reason_words(str(run['stop_reason']))}")
    if run.get("waiting_for"):
        lines.append(f"  waiting for  {run['waiting_for']}")
    return lines + link_lines(run)


def budget_used_text(used: dict[str, Any], kind: Optional[str]) -> str:
    """``iterations 4, hours 0.2, evaluation seconds 31.5, tokens 0``: GPU seconds are called
    evaluation seconds unless the run's timings come from a GPU."""
    names = {"gpu_seconds": "GPU seconds" if kind == "gpu" else "evaluation seconds"}
    return ", ".join(
        f"{names.get(key, key)} {value:g}" if isinstance(value, (int, float)) else f"{names.get(key, key)} {value}"
        for key, value in used.items()
    )


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
        state = _COUNTER.sub("", state).strip()  # "queued (40 s)" counts as "queued"
        counts[state] = counts.get(state, 0) + 1
    return "candidates " + ", ".join(f"{count} {state}" for state, count in counts.items())


# A duration that grows while nothing else changes: "(40 s)", "for 2 min", "(attempt 3, ...)" stay.
_COUNTER = re.compile(r"\(?\b\d+(?:\.\d+)? ?(?:s|min|h)\b\)?")


def status_head(run: dict[str, Any], width: int = 24) -> str:
    """The bar, best, goal, status (phase): the first line of ``watch``."""
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
    return line


def progress_extras(run: dict[str, Any], *, with_time: bool = True) -> list[str]:
    """What follows the head: time, the candidates in flight, a wait for a worker, a failing proposer."""
    extras = [time_line(run) if with_time else "", _candidate_counts(run),
              str(run.get("waiting_for_worker") or ""), str(run.get("proposer_failing") or "")]
    return [extra for extra in extras if extra]


def progress_line(run: dict[str, Any], width: int = 24, *, with_time: bool = True) -> str:
    """One line on a run: the bar, best, goal, status (phase), then what is known of time left,
    the candidates in flight, a wait for a worker and a failing proposer."""
    return "  ".join([status_head(run, width)] + progress_extras(run, with_time=with_time))


def live_block(run: dict[str, Any], columns: int) -> list[str]:
    """``watch``'s lines on a terminal ``columns`` wide: the head, then one line per extra, each
    cut to fit so that no line wraps (a wrapped line could not be redrawn in place)."""
    fit = max(20, columns - 1)
    lines = [status_head(run)] + [f"  {extra}" for extra in progress_extras(run)]
    return [line if len(line) <= fit else line[: fit - 1] + "…" for line in lines]


def change_key(run: dict[str, Any]) -> str:
    """What a pipe prints a new line for: the run without its clocks (elapsed, waiting times)."""
    return _COUNTER.sub("", progress_line(run, with_time=False))


def _redraw(out, previous: int, lines: list[str]) -> None:
    """Replace the ``previous`` lines drawn last with ``lines``: back to the first one's start,
    erase to the end of the screen, draw."""
    up = f"\033[{previous - 1}A" if previous > 1 else ""
    out.write("\r" + up + "\033[J" + "\n".join(lines))
    out.flush()


def follow(client, run_id: str, *, interval: float, out=None, columns: Optional[int] = None) -> int:
    """Poll the run until it ends; on a terminal a block redrawn in place within its width,
    otherwise one line per real change (not per tick of a clock)."""
    out = out or sys.stdout
    live = out.isatty()
    drawn = 0
    last = None
    try:
        while True:
            run = client.get_run(run_id)
            if live:
                width = columns or shutil.get_terminal_size((100, 24)).columns
                lines = live_block(run, width)
                _redraw(out, drawn, lines)
                drawn = len(lines)
            elif change_key(run) != last:
                print(progress_line(run), file=out, flush=True)
            last = change_key(run)
            status = run.get("status")
            if status in FINISHED_RUN_STATUSES:
                if live:
                    out.write("\n")
                reason = f": {reason_words(str(run['stop_reason']))}" if run.get("stop_reason") else ""
                print(f"run {run_id} {status}{reason}", file=out, flush=True)
                return 1 if status == "failed" else 0
            time.sleep(interval)
    except Exception:
        # A poll that fails (the API went away) must not leave the error message glued to the
        # end of the live block: close its line first. (Ctrl-C is not an Exception; its
        # handlers start their own line.)
        if live and drawn:
            out.write("\n")
            out.flush()
        raise
