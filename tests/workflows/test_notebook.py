"""The notebook: attempts, hints, compaction and feedback, without Temporal."""

from __future__ import annotations

from workflows import notebook as nb
from workflows.types import Candidate, EvaluateResult, Notebook


def ok(speedup: float, **profile) -> EvaluateResult:
    return EvaluateResult(status="ok", speedup=speedup, roofline=speedup / 10, profile=profile)


def failed(status: str, message: str) -> EvaluateResult:
    return EvaluateResult(status=status, message=message)


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


def test_feedback_names_the_candidate_and_the_reason():
    assert nb.feedback(Candidate(2, "s", "swap loops"), failed("incorrect", "rel rms 0.2 > 0.01\ntrace")) == (
        "#2 swap loops: incorrect rel rms 0.2 > 0.01"
    )
    assert nb.feedback(Candidate(0, "s", "t"), ok(1.234, registers=80)) == "#0 t: ok 1.23x registers=80"


def test_iteration_feedback_adds_the_proposer_errors_bounded():
    errors = [f"error {n} " + "x" * 500 for n in range(nb.MAX_PROPOSER_ERRORS + 3)]
    lines = nb.iteration_feedback([Candidate(0, "s", "t")], [ok(1.5)], errors)
    assert lines[0] == "#0 t: ok 1.5x" and len(lines) == 1 + nb.MAX_PROPOSER_ERRORS
    assert lines[1].startswith("error 0 ") and all(len(line) == nb.FEEDBACK_LIMIT for line in lines[1:])
