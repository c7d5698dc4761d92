"""What people read about a run in the Temporal Web UI: the details line, each activity's summary
and the notes a champion's confirmation leaves on its attempt.

Pure functions of the run's state, so the workflow may call them while it replays. Scores are
written by ``Goal.format_value`` and targets by ``Goal.format_target``, as everywhere else.
"""

from __future__ import annotations

from collections import Counter
from typing import Optional, Sequence

from workflows.rules import best_value, result_value
from workflows.types import BestKernel, Candidate, EvaluateResult, Goal

# Temporal keeps activity summaries short; longer ones are cut.
SUMMARY_LIMIT = 200


def status_tally(statuses: Sequence[str]) -> str:
    """``["ok", "incorrect", "ok"]`` -> ``"2 ok / 1 incorrect"`` (most frequent first)."""
    counts = Counter(statuses)
    return " / ".join(f"{counts[s]} {s}" for s in sorted(counts, key=lambda s: (-counts[s], s))) or "no attempts"


def details_line(
    iteration: int, goal: Goal, best: Optional[BestKernel], statuses: Sequence[str], phase: str = ""
) -> str:
    """The one line the Web UI shows: ``iter 17 · best 1.32x · goal 2x · 3 ok / 1 incorrect``."""
    parts = [
        f"iter {iteration}",
        f"best {goal.format_value(best_value(goal, best))}",
        f"goal {goal.format_target()}",
        status_tally(statuses),
    ]
    if phase:
        parts.append(phase)
    return " · ".join(parts)


def attempt_summary(iteration: int, index: int, total: int, result: EvaluateResult) -> str:
    """The Web UI's line for one recorded attempt: ``iter 17 · candidate 3/4 · 1.32× · ok``."""
    parts = [f"iter {iteration}", f"candidate {index + 1}/{total}"]
    if result.speedup is not None:
        parts.append(f"{result.speedup:.3g}×")
    parts.append(result.status)
    return " · ".join(parts)


def evaluate_summary(iteration: int, candidate: Candidate, total: int, confirm: bool) -> str:
    """``iter 17 · candidate 3/4 · evaluate · tile 64``, cut to ``SUMMARY_LIMIT``."""
    action = "confirm" if confirm else "evaluate"
    text = f"iter {iteration} · candidate {candidate.index + 1}/{total} · {action} · {candidate.strategy}"
    return text[:SUMMARY_LIMIT]


def confirmed_note(goal: Goal, first: EvaluateResult, confirmed: EvaluateResult) -> str:
    """The message of a challenger whose paired re-timing still beats the best."""
    return (
        f"confirmed: first {goal.format_value(result_value(goal, first))}, "
        f"paired {goal.format_value(result_value(goal, confirmed))}. {confirmed.message}"
    ).strip()


def unconfirmed_note(goal: Goal, first: EvaluateResult, confirmed: EvaluateResult) -> str:
    """The message of a challenger whose paired re-timing did not hold up."""
    return (
        f"not confirmed: first {goal.format_value(result_value(goal, first))}, paired run gave "
        f"{confirmed.status} {goal.format_value(result_value(goal, confirmed))}. {first.message}"
    ).strip()


def no_worker_reason(queue: str, gpu_wait_s: float) -> str:
    """Why a run paused itself when no evaluation worker took its work."""
    return (
        f"no evaluation worker picked up work on task queue {queue} within {gpu_wait_s:g} s; "
        "start one, then resume the run"
    )
