"""`marathon show` names a failed run's reason and what a live run waits for (issue 13, items 1, 7)."""

from __future__ import annotations

from marathon.commands.display import describe_run


def test_a_failed_run_shows_its_reason():
    reason = "the llm proposer cannot work (iteration 1): set MARATHON_LLM_BASE_URL on the worker"
    lines = describe_run({"id": "kda-1", "problem": "kda", "status": "failed", "stop_reason": reason})
    assert lines[0] == "run kda-1  kda  failed"
    assert f"  failed       {reason}" in lines


def test_a_run_on_a_queue_nobody_polls_says_so():
    waiting = "no evaluation worker polls task queue marathon-gpu-sm90: start one on a sm90 machine"
    lines = describe_run({"id": "kda-1", "problem": "kda", "status": "running", "waiting_for": waiting})
    assert f"  waiting for  {waiting}" in lines
    assert not any("waiting for" in line for line in describe_run({"id": "kda-2", "status": "running"}))


def test_show_says_how_busy_the_gpu_was_and_nothing_of_a_gpu_on_cpu_workers():
    run = {"id": "kda-1", "status": "completed", "evaluation_gpu_s": 3700.0, "gpu_busy_fraction": 0.41,
           "timing_fraction": 0.125, "timing_kind": "gpu"}
    assert "  gpu          GPU busy 41%, timing 12% of 1h01m of evaluation" in describe_run(run)
    on_cpu = describe_run({**run, "gpu_busy_fraction": None, "timing_kind": "interpreter"})
    assert "  evaluation   Timing 12% of 1h01m of evaluation" in on_cpu
    assert not any("gpu" in line.lower() for line in on_cpu)
    assert not any("gpu" in line for line in describe_run({"id": "kda-2", "status": "running"}))


# ---- words a newcomer reads: stop reasons, a stopping run, a failing proposer, CPU mode, no runs ----

import argparse  # noqa: E402
from datetime import datetime, timezone  # noqa: E402

from marathon.commands.client import runs_command  # noqa: E402
from workflows import messages  # noqa: E402
from workflows.types import OptimizeInput, RunState, StartFrom  # noqa: E402


def test_a_stopped_run_says_why_in_words_not_stopped_because_stopped():
    lines = describe_run({"id": "kda-1", "status": "stopped", "stop_reason": "stopped"})
    assert "  ended        stopped on request (marathon stop) (stopped)" in lines
    lines = describe_run({"id": "kda-1", "status": "completed", "stop_reason": "budget_iterations"})
    assert "  ended        its iteration budget was spent (budget_iterations)" in lines


def _answer(state: RunState, inp: OptimizeInput = None):
    view = messages.LoopView(status="running", phase="confirming", stop_reason="", candidates=[],
                             candidates_iteration=0, evaluate_queue="q")
    now = datetime.now(timezone.utc)
    return messages.status_answer(inp or OptimizeInput(run_id="r", problem="p"), state, view, now)


def test_a_run_asked_to_stop_shows_stopping_until_its_step_ends():
    assert _answer(RunState()).phase == "confirming"
    answer = _answer(RunState(stop_requested=True))
    assert answer.status == "running"
    assert answer.phase == "stopping: asked to stop, ending after the current step (confirming)"


def test_a_continued_run_says_where_its_own_iterations_start():
    parent = StartFrom(run_id="kda-parent", kind="continue", iteration=40)
    assert _answer(RunState(iteration=42), OptimizeInput(run_id="r", problem="p", start_from=parent)).start_iteration == 40
    fork = StartFrom(run_id="kda-parent", kind="fork", iteration=40)
    assert _answer(RunState(), OptimizeInput(run_id="r", problem="p", start_from=fork)).start_iteration == 0


def test_show_names_a_failing_proposer_and_evaluation_seconds_without_a_gpu():
    failing = "proposer failing: LLM endpoint http://x/v1 is unreachable (1 of 3 iterations without a candidate)"
    run = {"id": "kda-1", "status": "running", "proposer_failing": failing,
           "budget_used": {"iterations": 1.0, "gpu_seconds": 31.5}, "best": {"timing_kind": "interpreter"}}
    lines = describe_run(run)
    assert f"  PROPOSER     {failing}" in lines
    assert "  budget used  iterations 1, evaluation seconds 31.5" in lines
    on_gpu = describe_run({**run, "best": {"timing_kind": "gpu"}})
    assert "  budget used  iterations 1, GPU seconds 31.5" in on_gpu
    queued = describe_run({"id": "kda-1", "status": "running",
                           "waiting_for_worker": "queued: 2 candidates, 1 evaluation worker busy on marathon-gpu-cpu"})
    assert "  queued       queued: 2 candidates, 1 evaluation worker busy on marathon-gpu-cpu" in queued
    assert not any("WAITING" in line for line in queued)


class NoRuns:
    def list_runs(self, **_):
        return {"data": [], "count": 0}


def test_runs_with_no_runs_gives_the_next_step(capsys):
    args = argparse.Namespace(status=None, problem=None, limit=20)
    assert runs_command.__wrapped__(NoRuns(), args) == 0
    out = capsys.readouterr().out
    assert "no runs yet: start one with `marathon run kda --iterations 2`" in out and "marathon watch" in out
    assert runs_command.__wrapped__(NoRuns(), argparse.Namespace(status="failed", problem=None, limit=20)) == 0
    assert "no runs matching the filter" in capsys.readouterr().out


def test_show_names_the_baseline_of_the_best():
    run = {"id": "kda-1", "status": "completed", "best_speedup": 0.00192, "baseline": "eager",
           "best": {"timing_kind": "interpreter"}}
    assert "  best         0.00192x vs eager (interpreter timing: CPU, noisy)" in describe_run(run)


class Continues:
    def continue_run(self, parent: str, body: dict) -> dict:
        more = body.get("iterations", 20)
        return {"id": "kda-child", "budget": {"iterations": 40 + more}}


def test_continue_without_iterations_says_what_budget_it_takes(capsys):
    from marathon.commands.run import continue_run

    args = argparse.Namespace(continue_run="kda-parent", iterations=None, hours=None, goal=None, objective=None,
                              wait=False)
    assert continue_run.__wrapped__(Continues(), args) == 0
    out = capsys.readouterr().out
    assert ("no --iterations given: run kda-parent's iteration budget again, so up to 60 iterations in all, "
            "counting its own; `--iterations N` gives N more instead") in out
    assert continue_run.__wrapped__(Continues(), argparse.Namespace(**{**vars(args), "iterations": 5})) == 0
    assert "no --iterations given" not in capsys.readouterr().out
