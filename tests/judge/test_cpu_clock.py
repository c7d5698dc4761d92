"""Where no cpuacct cgroup can be made, the judge reads the candidate's CPU time from /proc for
the sandbox's whole process tree (kernels/judge/cpu_clock.py): a wait for a core is not a
kernel's time, a grandchild's work is, and the clock never goes back when a thread exits."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from kernels import timing
from kernels.judge import cgroups, cpu_clock, scoring

pytestmark = pytest.mark.skipif(not cpu_clock.available(), reason="needs Linux /proc schedstat and children")

BURN = "import time\nend = time.thread_time() + {seconds}\nwhile time.thread_time() < end: pass\n"


def test_the_tree_clock_counts_a_grandchild_s_work_and_never_goes_back(tmp_path):
    # A child that waits for a grandchild, which burns 0.3 s of CPU, says so, sleeps, and exits.
    done = tmp_path / "burnt"
    burn = BURN.format(seconds=0.3) + f"open({str(done)!r}, 'w').close()\ntime.sleep(1.5)\n"
    child = subprocess.Popen([sys.executable, "-c",
                              f"import subprocess, sys, time\nsubprocess.run([sys.executable, '-c', {burn!r}])\n"
                              "time.sleep(3)"])
    clock = cpu_clock.TreeClock(child.pid)
    try:
        start = clock.ns() / 1e6
        deadline = time.monotonic() + 60
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        burnt = clock.ns() / 1e6 - start
        time.sleep(0.5)
        asleep = clock.ns() / 1e6 - start - burnt
        while child.poll() is None and time.monotonic() < deadline:  # the grandchild exits first
            time.sleep(0.2)
            after_exit = clock.ns() / 1e6 - start
            assert after_exit >= burnt, (after_exit, burnt)
    finally:
        child.wait(timeout=60)
    assert done.exists()
    assert 300 <= burnt <= 2000, burnt  # its 0.3 s, and the interpreters' start-up
    assert asleep < 50, asleep


def test_a_box_without_cpuacct_reads_its_sandbox_s_tree(tmp_path):
    box = cgroups.open_box(disable=cgroups.CONTROLLERS)
    assert box.cpu_ns() is None  # no sandbox started yet: nothing to read
    done = tmp_path / "burnt"
    code = BURN.format(seconds=0.3) + f"open({str(done)!r}, 'w').close()\ntime.sleep(30)\n"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        box.pgid = child.pid
        first = box.cpu_ns()
        deadline = time.monotonic() + 60
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        used_ms = (box.cpu_ns() - first) / 1e6
    finally:
        child.kill()
        child.wait()
    assert done.exists() and 250 <= used_ms <= 2000, used_ms  # its 0.3 s of work, less what ran before `first`
    assert box.layers["cpu_time"].startswith("no cpuacct cgroup: /proc schedstat")


def test_a_cpu_call_reports_the_wall_clock_its_batch_is_bounded_by():
    # The process's own account is on the caller's clock (scoring.check_batch); CPU time is read outside.
    _, event, wall = timing.timed_call(lambda: time.sleep(0.05), "cpu")
    assert event == wall and wall >= 50


def test_on_the_cpu_the_tree_s_cpu_time_decides_not_the_wall():
    # A loaded machine: walls 20x the CPU time. The CPU time decides; without it, the wall.
    batches = [{"call_ms": [100.0] * 3, "batch_ms": 300.0, "outside_ms": 301.0, "cpu_ms": 15.0, "calls": 3}] * 2
    times, clock = scoring.decide(batches, "cpu")
    assert times == [5.0, 5.0] and clock == "cpu time of the process tree"
    times, clock = scoring.decide([dict(b, cpu_ms=None) for b in batches], "cpu")
    assert times == [pytest.approx(100.33, abs=0.01)] * 2 and clock == "the caller's wall clock"
