"""The loop's pure logic, without Temporal."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from workflows import notebook as nb
from workflows import rules, ui_text
from workflows.types import BestKernel, Budget, Candidate, EvaluateResult, Goal, Notebook, RunState


def ok(speedup: float, **profile) -> EvaluateResult:
    return EvaluateResult(status="ok", speedup=speedup, roofline=speedup / 10, profile=profile)


def failed(status: str, message: str) -> EvaluateResult:
    return EvaluateResult(status=status, message=message)


def best(speedup: float) -> BestKernel:
    return BestKernel(iteration=1, index=0, source_sha="a", strategy="s", speedup=speedup, roofline=speedup / 10)


def test_challenger_picks_the_highest_result_that_beats_the_best():
    goal = Goal()
    results = [ok(1.2), failed("incorrect", "max error 3e-1"), ok(1.5), ok(1.5), ok(0.9)]
    assert rules.challenger(goal, best(1.3), results) == 2  # ties go to the earlier one
    assert rules.challenger(goal, best(1.5), results) is None  # equal is not better
    assert rules.challenger(goal, None, [failed("compile_error", "x")]) is None
    assert rules.challenger(Goal(objective="roofline", target=0.5), best(1.4), [ok(1.45), ok(1.0)]) == 0


def test_add_attempt_keeps_figures_and_messages_short():
    notebook = Notebook()
    nb.add_attempt(notebook, 3, Candidate(0, "sha", "tile 64"), ok(1.25, registers=96, spills=0))
    nb.add_attempt(notebook, 3, Candidate(1, "sha", "tile 128"), failed("compile_error", "E" * 500 + "\nsecond line"))
    first, second = notebook.entries
    assert (first.status, first.speedup, first.note) == ("ok", 1.25, "registers=96 spills=0")
    assert second.note == "E" * (nb.NOTE_LIMIT - 1) + "…"
    assert notebook.profiler_findings == ["iter 3 #0 tile 64: registers=96 spills=0"]


def test_hints_are_bounded_and_blank_ones_ignored():
    notebook = Notebook()
    assert not nb.add_hint(notebook, "   ")
    for number in range(nb.MAX_HINTS + 5):
        nb.add_hint(notebook, f"hint {number}")
    assert len(notebook.hints) == nb.MAX_HINTS and notebook.hints[-1] == f"hint {nb.MAX_HINTS + 4}"


def fill(notebook: Notebook, iteration: int) -> None:
    nb.add_attempt(notebook, iteration, Candidate(0, "a", "grow tiles"), ok(1.0 + iteration / 100))
    nb.add_attempt(notebook, iteration, Candidate(1, "b", "split K"), failed("incorrect", "rel rms 0.3"))
    nb.add_attempt(notebook, iteration, Candidate(2, "c", f"random {iteration}"), ok(0.5))


def test_compaction_folds_old_entries_into_lessons_and_keeps_recent_ones():
    notebook = Notebook(hints=["keep me"])
    for iteration in range(1, 5):
        fill(notebook, iteration)
    compacted = nb.compact(notebook, keep_recent=3)
    assert len(notebook.entries) == 12, "compact must not change its input"
    assert [(e.iteration, e.index) for e in compacted.entries] == [(4, 0), (4, 1), (4, 2)]
    assert compacted.stats["folded"] == 9
    assert compacted.lessons[0] == "9 earlier attempts (iterations 1-3): 6 ok, 3 incorrect"
    assert compacted.lessons[1].startswith("Best strategies so far: grow tiles 1.03x (iter 3, 3/3 ok)")
    assert compacted.failed_strategies == ["split K: 3 tries, none correct (incorrect: rel rms 0.3)"]
    assert compacted.hints == ["keep me"] and compacted.compactions == 1


def test_notebook_stays_bounded_over_a_thousand_iterations():
    notebook = Notebook()
    limit = 40
    for iteration in range(1, 1001):
        fill(notebook, iteration)
        if nb.needs_compaction(notebook, limit):
            notebook = nb.compact(notebook, nb.keep_recent_for(limit), llm_lessons=[f"lesson {iteration}"] * 30)
    assert len(notebook.entries) <= limit
    assert notebook.stats["folded"] + len(notebook.entries) == 3000
    assert len(notebook.stats["strategies"]) <= nb.KEEP_BEST_STRATEGIES + nb.KEEP_FAILED_STRATEGIES
    assert len(notebook.lessons) <= 2 + nb.MAX_LLM_LESSONS
    assert len(notebook.failed_strategies) <= nb.MAX_FAILED_STRATEGIES
    # The strongest strategy and the always-failing one survive every compaction, fully counted.
    recent = sum(1 for entry in notebook.entries if entry.strategy == "grow tiles")
    assert notebook.stats["strategies"]["grow tiles"]["tries"] + recent == 1000
    assert "Best strategies so far: grow tiles" in notebook.lessons[1]
    assert "split K" in notebook.failed_strategies[0]


def test_stop_reasons_in_priority_order():
    goal, budget = Goal(target=2.0, tolerance=0.1), Budget(iterations=10, hours=1, gpu_seconds=100, tokens=1000, plateau_iterations=3)
    state = RunState(iteration=5, last_improvement_iteration=4)
    assert rules.stop_reason(goal, budget, state, hours=0.5) == ""
    assert rules.stop_reason(goal, budget, RunState(iteration=5, best=best(1.8)), 0.5) == "goal_reached"  # 1.8 >= 2*(1-0.1)
    assert rules.stop_reason(goal, budget, RunState(iteration=10, last_improvement_iteration=9), 0.5) == "budget_iterations"
    assert rules.stop_reason(goal, budget, state, hours=1.0) == "budget_hours"
    assert rules.stop_reason(goal, budget, RunState(iteration=5, last_improvement_iteration=4, gpu_seconds=100), 0) == "budget_gpu_seconds"
    assert rules.stop_reason(goal, budget, RunState(iteration=5, last_improvement_iteration=4, tokens=1000), 0) == "budget_tokens"
    assert rules.stop_reason(goal, budget, RunState(iteration=7, last_improvement_iteration=4), 0) == "plateau"
    assert rules.stop_reason(goal, budget, RunState(iteration=10, stop_requested=True, best=best(3)), 0) == "stopped"


def test_hours_since_start():
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert rules.hours_since(start.isoformat(), start + timedelta(minutes=90)) == pytest.approx(1.5)
    assert rules.hours_since(None, start) == 0.0


def test_details_line_reads_at_a_glance():
    line = ui_text.details_line(17, Goal(target=2.0), best(1.32), ["ok", "ok", "incorrect", "ok"])
    assert line == "iter 17 · best 1.32x · goal 2x · 3 ok / 1 incorrect"
    roof = ui_text.details_line(2, Goal(objective="roofline", target=0.6), best(4.1), [], "evaluating 4")
    assert roof == "iter 2 · best 41.0% of roofline · goal 60% of roofline · no attempts · evaluating 4"


def test_feedback_names_the_candidate_and_the_reason():
    assert nb.feedback(Candidate(2, "s", "swap loops"), failed("incorrect", "rel rms 0.2 > 0.01\ntrace")) == (
        "#2 swap loops: incorrect rel rms 0.2 > 0.01"
    )
    assert nb.feedback(Candidate(0, "s", "t"), ok(1.234, registers=80)) == "#0 t: ok 1.23x registers=80"
