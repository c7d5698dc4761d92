"""The run's rules (input, champion, stop), the goal's own scoring and wording, and the Web UI's
text, without Temporal."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from workflows import rules, ui_text
from workflows.types import BestKernel, Budget, Candidate, EvaluateResult, Goal, OptimizeInput, RunState


def ok(speedup: float) -> EvaluateResult:
    return EvaluateResult(status="ok", speedup=speedup, roofline=speedup / 10)


def failed(status: str, message: str) -> EvaluateResult:
    return EvaluateResult(status=status, message=message)


def best(speedup: float) -> BestKernel:
    return BestKernel(iteration=1, index=0, source_sha="a", strategy="s", speedup=speedup, roofline=speedup / 10)


def test_the_goal_scores_and_writes_its_own_figure():
    speedup, roof = Goal(target=2.5), Goal(objective="roofline", target=0.6, intent="beat FLA")
    assert (speedup.score(1.4, 0.2), roof.score(1.4, 0.2)) == (1.4, 0.2)
    written = (speedup.format_value(1.3219), roof.format_value(0.41), speedup.format_value(None))
    assert written == ("1.32x", "41.0% of roofline", "-")
    # Small ratios keep their significant figures: never "0.00x".
    assert speedup.format_value(0.0019234) == "0.00192x"
    assert (speedup.format_target(), roof.format_target()) == ("2.5x", "60% of roofline")
    assert speedup.describe() == "2.5x geomean speedup over the baseline"
    assert roof.describe() == "0.6 of the roofline (beat FLA)"


def test_the_goal_says_what_is_wrong_with_it():
    assert Goal().problems() == []
    problems = Goal(objective="latency", target=0, tolerance=1, intent="x" * (Goal.INTENT_LIMIT + 1)).problems()
    assert problems == [
        "goal objective must be one of speedup, roofline, got 'latency'",
        "goal target must be > 0, got 0",
        "goal tolerance must be in [0, 1), got 1",
        f"goal intent is limited to 4000 characters, got {Goal.INTENT_LIMIT + 1}",
    ]
    assert Goal(objective="roofline", target=1.5).problems() == ["a roofline fraction cannot exceed 1, got target 1.5"]


def test_input_problems_name_each_bad_field():
    assert rules.input_problems(OptimizeInput(run_id="r", problem="kda", evaluate_task_queue="marathon-gpu-cpu")) == []
    bad = OptimizeInput(run_id="r", problem="", goal=Goal(target=-1), candidates_per_iteration=0, notebook_limit=1,
                        evaluate_task_queue="marathon-gpu-cpu")
    assert rules.input_problems(bad) == [
        "goal target must be > 0, got -1",
        "problem must be named",
        "candidates_per_iteration must be between 1 and 64, got 0",
        "notebook_limit must be >= 2, got 1",
    ]


def test_challenger_picks_the_highest_result_that_beats_the_best():
    goal = Goal()
    results = [ok(1.2), failed("incorrect", "max error 3e-1"), ok(1.5), ok(1.5), ok(0.9)]
    assert rules.challenger(goal, best(1.3), results) == 2  # ties go to the earlier one
    assert rules.challenger(goal, best(1.5), results) is None  # equal is not better
    assert rules.challenger(goal, None, [failed("compile_error", "x")]) is None
    assert rules.challenger(Goal(objective="roofline", target=0.5), best(1.4), [ok(1.45), ok(1.0)]) == 0


def test_promote_keeps_what_the_best_kernel_needs():
    result = EvaluateResult(status="ok", speedup=1.7, roofline=0.3, report_sha="r" * 64, timing_kind="interpreter")
    promoted = rules.promote(Candidate(3, "s" * 64, "tile 64"), 9, result)
    assert promoted == BestKernel(9, 3, "s" * 64, "tile 64", 1.7, 0.3, "r" * 64, "interpreter")


def test_stop_reasons_in_priority_order():
    goal = Goal(target=2.0, tolerance=0.1)
    budget = Budget(iterations=10, hours=1, gpu_seconds=100, tokens=1000, plateau_iterations=3)
    state = RunState(iteration=5, last_improvement_iteration=4)

    def reason(hours: float = 0.0, **fields) -> str:
        return rules.stop_reason(goal, budget, RunState(**fields), hours)

    assert rules.stop_reason(goal, budget, state, hours=0.5) == ""
    assert reason(0.5, iteration=5, best=best(1.8)) == "goal_reached"  # 1.8 >= 2*(1-0.1)
    assert reason(0.5, iteration=10, last_improvement_iteration=9) == "budget_iterations"
    assert rules.stop_reason(goal, budget, state, hours=1.0) == "budget_hours"
    assert reason(iteration=5, last_improvement_iteration=4, gpu_seconds=100) == "budget_gpu_seconds"
    assert reason(iteration=5, last_improvement_iteration=4, tokens=1000) == "budget_tokens"
    assert reason(iteration=7, last_improvement_iteration=4) == "plateau"
    assert reason(iteration=10, stop_requested=True, best=best(3)) == "stopped"
    assert set(rules.STOP_REASONS) >= {"stopped", "goal_reached", "budget_iterations", "plateau"}


def test_hours_since_start_and_budget_used():
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert rules.hours_since(start.isoformat(), start + timedelta(minutes=90)) == pytest.approx(1.5)
    assert rules.hours_since(None, start) == 0.0
    used = rules.budget_used(RunState(iteration=4, gpu_seconds=12.34567, tokens=300), 0.123456)
    assert used == {"iterations": 4.0, "hours": 0.1235, "gpu_seconds": 12.346, "tokens": 300.0}
    assert rules.tokens_left(Budget(tokens=1000), RunState(tokens=1200)) == 0
    assert rules.tokens_left(Budget(), RunState(tokens=1200)) is None


def test_details_line_reads_at_a_glance():
    line = ui_text.details_line(17, Goal(target=2.0), best(1.32), ["ok", "ok", "incorrect", "ok"])
    assert line == "iter 17 · best 1.32x · goal 2x · 3 ok / 1 incorrect"
    roof = ui_text.details_line(2, Goal(objective="roofline", target=0.6), best(4.1), [], "evaluating 4")
    assert roof == "iter 2 · best 41.0% of roofline · goal 60% of roofline · no attempts · evaluating 4"


def test_summaries_and_confirmation_notes():
    candidate = Candidate(2, "s", "tile " + "9" * 300)
    assert ui_text.attempt_summary(17, 2, 4, ok(1.3219)) == "iter 17 · candidate 3/4 · 1.32× · ok"
    summary = ui_text.evaluate_summary(17, candidate, 4, confirm=True)
    assert summary.startswith("iter 17 · candidate 3/4 · confirm · tile 99") and len(summary) == ui_text.SUMMARY_LIMIT
    first, paired = ok(1.5), EvaluateResult(status="ok", speedup=1.41, message="paired 5 reps")
    assert ui_text.confirmed_note(Goal(), first, paired) == "confirmed: first 1.5x, paired 1.41x. paired 5 reps"
    paired = EvaluateResult(status="incorrect", message="")
    assert ui_text.unconfirmed_note(Goal(), failed("ok", "fast"), paired) == (
        "not confirmed: first -, paired run gave incorrect -. fast"
    )
