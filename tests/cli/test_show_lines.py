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


def test_show_says_how_busy_the_gpu_was_and_nothing_when_unmeasured():
    run = {"id": "kda-1", "status": "completed", "evaluation_gpu_s": 3700.0, "gpu_busy_fraction": 0.41,
           "timing_fraction": 0.125}
    assert "  gpu          GPU busy 41%, timing 12% of 1h01m of evaluation" in describe_run(run)
    unmeasured = describe_run({**run, "gpu_busy_fraction": None})
    assert "  gpu          GPU busy —, timing 12% of 1h01m of evaluation" in unmeasured
    assert not any("gpu" in line for line in describe_run({"id": "kda-2", "status": "running"}))
