"""The project's own seed kernels are valid candidates: judged ``ok`` on the CPU.

Also the cancel path: a caller's cancel event kills a running judgement.
"""

from __future__ import annotations

import importlib.util
import threading
import time

import pytest

from kernels.judge import judge
from kernels.registry import get_problem
from tests.judge.corpus import CANDIDATES, TOY


def _seed(name: str) -> str:
    problem = get_problem(name)
    if importlib.util.find_spec(problem.space) is None:
        pytest.skip(f"{name}: search space module {problem.space} does not exist yet")
    return problem.seed_source()


@pytest.mark.parametrize("name", ["mla-decode", "mla-decode-paged", "kda", "kda-varlen"])
def test_project_seed_is_accepted_on_cpu(name):
    report = judge(_seed(name), name, device="cpu", timing_reps=1, timeout_s=600)
    assert report.status == "ok", report.message
    assert report.timing_kind == "interpreter" and report.speedup > 0
    # verify shapes are drawn from each listed shape's family, bench shapes are the listed ones
    assert len(get_problem(name).shape_set("cpu")) <= len(report.shapes) <= 2 * len(get_problem(name).shape_set("cpu"))
    for shape in report.shapes:
        assert shape["max_error"] <= shape["tolerance"]


def test_cancel_kills_a_running_judgement():
    cancel = threading.Event()
    phases: list[str] = []
    timers: list[threading.Timer] = []

    def beat(phase: str) -> None:
        phases.append(phase)
        if phase.startswith("checking correctness") and not timers:  # the candidate hangs in its first call
            timers.append(threading.Timer(2.0, cancel.set))
            timers[0].start()

    started = time.monotonic()
    try:
        report = judge((CANDIDATES / "hang.py").read_text(), TOY, device="cpu", timeout_s=120, cancel=cancel,
                       heartbeat=beat)
    finally:
        for timer in timers:
            timer.cancel()
    assert report.status == "timeout"
    assert "cancelled by the caller" in report.message
    assert sum(p.startswith("checking correctness, call 1/") for p in phases) >= 1  # heartbeats flowed while it hung
    assert time.monotonic() - started < 60
