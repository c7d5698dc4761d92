"""The cgroup box (``cgroups.py``) and the private filesystem: resources no judgement shares.

Unit tests drive the box with plain processes (freezing, CPU time, ``pids.max``, the weaker
layers without cgroups); judgement tests put a compromised candidate process
(``compromised.py``) in it: a thread storm starves only itself, a full disk is its own, a
thread burning CPU while idle cannot slow the baseline (it is frozen then, and its CPU time
is the candidate's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from kernels.judge import cgroups, judge, runner
from tests.judge.corpus import CANDIDATES, TOY

HAVE_CGROUPS = all(cgroups.controller_dir(c) for c in cgroups.CONTROLLERS)
needs_cgroups = pytest.mark.skipif(not HAVE_CGROUPS, reason="needs root and cgroup v1 pids, cpuacct, freezer")
SPIN = "while True: pass"


def start_in(box: cgroups.Box, code: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", code], preexec_fn=box.enter, start_new_session=True,
                               stdout=subprocess.PIPE, text=True)
    box.pgid = process.pid
    return process


def cpu_over(box: cgroups.Box, seconds: float) -> float:
    before = box.cpu_ns()
    time.sleep(seconds)
    return (box.cpu_ns() - before) / 1e9


@needs_cgroups
def test_a_frozen_box_runs_nothing_and_its_cpu_time_is_counted_from_outside():
    box = cgroups.open_box(require=cgroups.CONTROLLERS)
    process = start_in(box, SPIN)
    try:
        time.sleep(0.3)
        assert cpu_over(box, 0.5) > 0.05  # spinning, counted by the kernel
        assert box.freeze() == "freezer" and box.frozen()
        assert cpu_over(box, 0.5) < 0.005  # nothing of it runs
        box.thaw()
        assert cpu_over(box, 0.5) > 0.05
        assert process.pid in box.tasks()
    finally:
        box.close()
    assert process.wait(timeout=10) == -9  # close() killed what was left
    assert not any(os.path.exists(folder) for folder in box.groups.values())


@needs_cgroups
def test_pids_max_bounds_the_threads_of_one_box():
    box = cgroups.open_box(require=("pids",))
    code = ("import threading\nn = 0\nstop = threading.Event()\ntry:\n    while n < 5000:\n"
            "        threading.Thread(target=stop.wait, daemon=True).start(); n += 1\n"
            "except RuntimeError:\n    pass\nprint(n, flush=True)\nstop.set()")
    process = start_in(box, code)
    try:
        count = int(process.communicate(timeout=60)[0])
    finally:
        box.close()
    assert 0 < count < cgroups.PIDS_MAX


def state(pid: int) -> str:
    return open(f"/proc/{pid}/stat").read().split(") ")[1][0]


def test_without_cgroups_the_weaker_layers_are_named_and_sigstop_holds_the_tree():
    box = cgroups.open_box(disable=cgroups.CONTROLLERS)
    assert box.groups == {} and box.cpu_ns() is None
    assert all(text.startswith("no ") for text in box.layers.values()), box.layers
    # A child in a session of its own, as bubblewrap's --new-session makes the sandbox.
    code = ("import os, subprocess, sys, time\n"
            f"child = subprocess.Popen([sys.executable, '-c', {SPIN!r}], start_new_session=True)\n"
            "print(child.pid, flush=True)\ntime.sleep(60)")
    process = start_in(box, code)
    child = int(process.stdout.readline())
    try:
        time.sleep(0.2)
        assert box.freeze() == "sigstop"
        time.sleep(0.1)
        assert state(process.pid) == "T" and state(child) == "T"  # the whole tree, sessions aside
        box.thaw()
        time.sleep(0.1)
        assert state(child) in "RS"
    finally:
        os.kill(child, 9)
        process.kill()
        process.wait()


def test_a_required_controller_that_is_missing_refuses_with_what_to_do():
    with pytest.raises(cgroups.BoxUnavailable, match=r"cgroup v1 controller\(s\) freezer cannot be created.*root"):
        cgroups.open_box(require=("freezer",), disable=("freezer",))


@pytest.fixture
def compromised(monkeypatch):
    monkeypatch.setattr(runner, "SANDBOX_MODULE", "tests.judge.compromised")


def attack(name: str) -> str:
    return f"# attack: {name}\n" + (CANDIDATES / "honest_cumsum.py").read_text()


def judged(name: str, **kwargs):
    return judge(attack(name), TOY, device="cpu", timing_reps=kwargs.pop("reps", 3), timeout_s=180,
                 static_policy=False, **kwargs)


@needs_cgroups
def test_a_thread_storm_starves_only_its_own_box(compromised):
    storm: dict = {}

    def beat(phase: str) -> None:
        storm.setdefault("loading_at", time.monotonic()) if phase.startswith("loading") else None

    worker = threading.Thread(target=lambda: storm.update(report=judged("thread_storm", heartbeat=beat)))
    worker.start()
    while "loading_at" not in storm and worker.is_alive():
        time.sleep(0.2)
    time.sleep(4)  # the storm holds its threads for 25 s from here
    honest = judged("honest")
    worker.join()
    count = int(storm["report"].message.split("storm ")[1])
    assert count < cgroups.PIDS_MAX  # bounded by its own box
    assert honest.status == "ok", honest.message  # a concurrent judgement still started its threads


def test_a_full_disk_is_the_candidates_own(compromised):
    report = judged("fill_disk")
    sizes = json.loads(report.message.split("filled ")[1])
    box = next(path for path in sizes if path not in ("/tmp", "/dev/shm"))
    assert 0 < sizes[box] <= runner.BOX_BYTES["cpu"]
    assert sizes["/dev/shm"] <= runner.SCRATCH_BYTES and sizes["/tmp"] <= runner.SCRATCH_BYTES


@needs_cgroups
def test_a_thread_burning_cpu_slows_only_the_candidate(compromised):
    honest, burner = judged("honest", reps=5), judged("burn_idle", reps=5)
    assert honest.status == burner.status == "ok", (honest.message, burner.message)
    for report in (honest, burner):
        for shape in [s for s in report.shapes if "timing" in s]:
            assert shape["timing"]["baseline"]["candidate_held"] == ["freezer"]
            assert shape["timing"]["candidate"]["clock"] == "cpu time of the process tree"
    # The burner's thread runs while its batches run (charged to it) and is frozen while the
    # baseline runs: its speedup falls instead of growing 4-9x as it did with a wall clock.
    assert burner.speedup < honest.speedup / 2, (burner.speedup, honest.speedup)
    print("speedup honest", honest.speedup, "burner", burner.speedup)


@needs_cgroups
def test_a_thread_left_running_is_seen_from_outside(compromised):
    report = judged("late_thread")
    assert report.status == "forbidden", report.message
    assert "more than after its first call" in report.message and "counted from outside" in report.message


def test_without_cgroups_a_judgement_says_so_and_uses_the_callers_clock(monkeypatch):
    monkeypatch.setattr(runner, "CGROUP_DISABLE", cgroups.CONTROLLERS)
    report = judge((CANDIDATES / "honest_cumsum.py").read_text(), TOY, device="cpu", timing_reps=3)
    assert report.status == "ok", report.message
    assert report.fingerprint["box"]["cpu_time"].startswith("no cpuacct cgroup")
    timed = [s for s in report.shapes if "timing" in s]
    assert timed
    for shape in timed:
        assert shape["timing"]["candidate"]["clock"] == "the caller's wall clock"
        assert shape["timing"]["baseline"]["candidate_held"] == ["sigstop"]
