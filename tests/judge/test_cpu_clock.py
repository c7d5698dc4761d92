"""CPU mode times calls by CPU time, and checks them against the CPU time of each process tree
read from outside (kernels/judge/cpu_clock.py): a wait for a core is not a kernel's time, and
work hidden between timed calls still shows on the judge's clock."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from kernels import timing
from kernels.judge import cpu_clock, scoring

pytestmark = pytest.mark.skipif(not cpu_clock.available(), reason="needs Linux /proc schedstat and children")

BURN = "import time\nend = time.thread_time() + {seconds}\nwhile time.thread_time() < end: pass\n"


def test_the_tree_clock_counts_a_grandchild_s_work_and_not_its_sleep(tmp_path):
    # A child that waits for a grandchild, which burns 0.3 s of CPU, says so, then sleeps.
    done = tmp_path / "burnt"
    burn = BURN.format(seconds=0.3) + f"open({str(done)!r}, 'w').close()\ntime.sleep(3)\n"
    child = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {burn!r}])"])
    try:
        start = cpu_clock.tree_cpu_ms(child.pid)
        deadline = time.monotonic() + 60
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        burnt = cpu_clock.tree_cpu_ms(child.pid) - start
        time.sleep(1.0)
        asleep = cpu_clock.tree_cpu_ms(child.pid) - start - burnt
    finally:
        child.wait(timeout=60)
    assert done.exists()
    assert 300 <= burnt <= 2000, burnt  # its 0.3 s, and the interpreters' start-up
    assert asleep < 50, asleep


def test_a_cpu_call_reports_its_cpu_time_not_its_wait():
    _, event, wall = timing.timed_call(lambda: time.sleep(0.05), "cpu")
    assert wall >= 50 and event < 10  # sleeping (or waiting for a core) is not the call's work
    _, event, wall = timing.timed_call(lambda: exec(BURN.format(seconds=0.02)), "cpu")
    assert 19 <= event <= wall


def _batches(event_ms: float, outside_cpu_ms: float, outside_ms: float, calls: int = 3) -> list[dict]:
    return [{"event_ms": [event_ms] * calls, "wall_ms": [event_ms * 3] * calls, "outside_ms": outside_ms * calls,
             "outside_cpu_ms": outside_cpu_ms * calls, "calls": calls}] * 2


def test_on_the_cpu_the_judges_clock_is_cpu_time():
    from tests.judge.test_judge_report import _score

    # A loaded machine: walls 20x the CPU time, for both. Honest: nothing is hidden.
    honest = {"candidate": _batches(5.0, 5.2, 100.0), "baseline": _batches(0.01, 0.02, 0.5)}
    assert _score("cpu", honest).status == "ok"
    # Work between the timed calls: the tree's CPU time sees 50 ms per call that the calls do not report.
    hiding = {"candidate": _batches(1.0, 50.0, 100.0), "baseline": _batches(0.01, 0.02, 0.5)}
    report = _score("cpu", hiding)
    assert report.status == "suspicious" and "the judge's clock saw 50.0000 ms per call" in report.message
    assert scoring.summary(hiding["candidate"])["outside_cpu_ms_per_call"] == 50.0
