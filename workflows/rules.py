"""The run's rules: which input may start a run, which result becomes the champion, and when a run stops.

Pure and deterministic like the notebook: the workflow calls these directly (they replay
identically) and tests exercise them without Temporal. Scores come from ``Goal.score``, so a
speedup goal and a roofline goal follow the same rules.
"""

from __future__ import annotations

from datetime import datetime
from typing import Optional, Sequence

from workflows import lineage
from workflows.types import BestKernel, Budget, Candidate, EvaluateResult, Goal, OptimizeInput, RunState

STOP_REASONS = (
    "stopped",
    "goal_reached",
    "budget_iterations",
    "budget_hours",
    "budget_gpu_seconds",
    "budget_tokens",
    "budget_usd",
    "plateau",
)


def input_problems(input: OptimizeInput) -> list[str]:
    """Why a run cannot start with this input; empty when it can."""
    errors = input.goal.problems() + input.budget.problems() + input.proposer.problems()
    errors += lineage.start_problems(input.start_from)
    if not input.problem:
        errors.append("problem must be named")
    if not 1 <= input.candidates_per_iteration <= OptimizeInput.MAX_CANDIDATES:
        errors.append(f"candidates_per_iteration must be between 1 and {OptimizeInput.MAX_CANDIDATES}, "
                      f"got {input.candidates_per_iteration}")
    if not 0 <= input.evaluations_in_flight <= 256:
        errors.append(f"evaluations_in_flight must be between 0 and 256, got {input.evaluations_in_flight}")
    if input.continue_as_new_every < 1:
        errors.append(f"continue_as_new_every must be >= 1, got {input.continue_as_new_every}")
    if input.notebook_limit < 2:
        errors.append(f"notebook_limit must be >= 2, got {input.notebook_limit}")
    if not input.gpu_wait_s > 0 or not input.evaluate_timeout_s > 0:
        errors.append(
            "gpu_wait_s and evaluate_timeout_s must be > 0, "
            f"got {input.gpu_wait_s} and {input.evaluate_timeout_s}"
        )
    if not input.evaluate_task_queue:
        errors.append(
            "evaluate_task_queue must name the task queue of the evaluation workers (e.g. marathon-gpu-sm90), "
            f"got {input.evaluate_task_queue!r}; the API fills it from MARATHON_GPU_TASK_QUEUE_PREFIX"
        )
    return errors


# ---- the champion ---------------------------------------------------------------------------


def result_value(goal: Goal, result: EvaluateResult) -> Optional[float]:
    """What one evaluation scores on the goal."""
    return goal.score(result.speedup, result.roofline)


def best_value(goal: Goal, best: Optional[BestKernel]) -> Optional[float]:
    """What the current best scores on the goal (None before any accepted kernel)."""
    return None if best is None else goal.score(best.speedup, best.roofline)


def beats(goal: Goal, best: Optional[BestKernel], result: EvaluateResult) -> bool:
    """True when an accepted result scores strictly above the current best (or there is none)."""
    if not result.accepted:
        return False
    value = result_value(goal, result)
    if value is None:
        return False
    current = best_value(goal, best)
    return current is None or value > current


def challenger(goal: Goal, best: Optional[BestKernel], results: Sequence[EvaluateResult]) -> Optional[int]:
    """Position in ``results`` of the highest-scoring result that beats the best; None if none.

    Ties go to the earlier position so the choice is stable.
    """
    chosen: Optional[int] = None
    for position, result in enumerate(results):
        if not beats(goal, best, result):
            continue
        if chosen is None or result_value(goal, result) > result_value(goal, results[chosen]):
            chosen = position
    return chosen


def outscores(goal: Goal, result: EvaluateResult, others: Sequence[EvaluateResult]) -> bool:
    """True when ``result`` scores strictly above every one of ``others`` that has a score."""
    value = result_value(goal, result)
    if value is None:
        return False
    return all(value > other for other in (result_value(goal, o) for o in others) if other is not None)


def promote(candidate: Candidate, iteration: int, result: EvaluateResult) -> BestKernel:
    """The confirmed challenger as the run's new best."""
    return BestKernel(
        iteration=iteration,
        index=candidate.index,
        source_sha=candidate.source_sha,
        strategy=candidate.strategy,
        speedup=result.speedup,
        roofline=result.roofline,
        report_sha=result.report_sha,
        timing_kind=result.timing_kind,
        profile=dict(result.profile),
    )


# ---- budget and stop ------------------------------------------------------------------------


def hours_since(started_at: Optional[str], now: datetime) -> float:
    if not started_at:
        return 0.0
    return max(0.0, (now - datetime.fromisoformat(started_at)).total_seconds() / 3600.0)


def budget_used(state: RunState, hours: float) -> dict[str, float]:
    return {
        "iterations": float(state.iteration),
        "hours": round(hours, 4),
        "gpu_seconds": round(state.gpu_seconds, 3),
        "tokens": float(state.tokens),
        # The agent proposer's use, for runs that have any (older runs keep their four keys).
        **({"usd": round(state.usd, 6), "tool_calls": float(state.tool_calls), "model_calls": float(state.model_calls)}
           if state.tool_calls or state.model_calls else {}),
    }


def stop_reason(goal: Goal, budget: Budget, state: RunState, hours: float) -> str:
    """Why the run must stop now, or "" to carry on. The user's stop comes first, then the goal,
    then each budget, then the plateau (no improvement for ``plateau_iterations`` iterations)."""
    if state.stop_requested:
        return "stopped"
    if goal.reached(best_value(goal, state.best)):
        return "goal_reached"
    if state.iteration >= budget.iterations:
        return "budget_iterations"
    if hours >= budget.hours:
        return "budget_hours"
    if budget.gpu_seconds is not None and state.gpu_seconds >= budget.gpu_seconds:
        return "budget_gpu_seconds"
    if budget.tokens is not None and state.tokens >= budget.tokens:
        return "budget_tokens"
    if budget.usd is not None and state.usd >= budget.usd:
        return "budget_usd"
    plateau = budget.plateau_iterations
    if plateau is not None and state.iteration - state.last_improvement_iteration >= plateau:
        return "plateau"
    return ""


def usd_left(budget: Budget, state: RunState) -> Optional[float]:
    return None if budget.usd is None else max(0.0, budget.usd - state.usd)


def tokens_left(budget: Budget, state: RunState) -> Optional[int]:
    return None if budget.tokens is None else max(0, budget.tokens - state.tokens)
