"""A judgement says what it is doing (phases, heartbeats) and shares the GPU through the lease."""

from __future__ import annotations

import threading
import time

from kernels.judge import judge
from kernels.judge.gpu_lease import GpuLease
from tests.judge.corpus import CANDIDATES, TOY

EXPECTED_PHASES = {"startup", "load", "references", "verify", "warm", "timing", "recheck", "closing"}


def test_phases_and_heartbeats_name_each_step():
    labels: list[str] = []
    report = judge((CANDIDATES / "honest_cumsum.py").read_text(), TOY, device="cpu", heartbeat=labels.append)
    assert report.status == "ok", report.message
    assert EXPECTED_PHASES <= set(report.phases), report.phases
    assert "lease_wait" not in report.phases  # a CPU judgement without a lease waits for nobody
    assert sum(report.phases.values()) <= report.duration_s + 0.05
    assert report.phases["load"] > 0
    assert any(label.startswith("checking correctness, call 1/") for label in labels), labels
    assert any(label.startswith("timing against the baseline, shape 1/") for label in labels), labels
    assert report.to_dict()["phases"] == report.phases


def test_timing_waits_for_the_gpu_lease(tmp_path):
    path = str(tmp_path / "gpu.lease")
    hold_s = 2.0
    warming = threading.Event()
    held: list[tuple[float, float]] = []
    timing_started: list[float] = []

    def on_phase(label: str) -> None:
        if label.startswith("warming up, shape 1/"):
            warming.set()
        if label.startswith("timing against the baseline") and not timing_started:
            timing_started.append(time.monotonic())

    def hold() -> None:
        warming.wait(120)
        with GpuLease(path).exclusive():
            start = time.monotonic()
            time.sleep(hold_s)
            held.append((start, time.monotonic()))

    holder = threading.Thread(target=hold)
    holder.start()
    report = judge((CANDIDATES / "honest_cumsum.py").read_text(), TOY, device="cpu", heartbeat=on_phase,
                   lease_path=path)
    holder.join()
    assert report.status == "ok", report.message
    assert held and timing_started
    # The judgement's timing began only after the other holder let the GPU go.
    assert timing_started[0] >= held[0][1]
    assert report.phases["lease_wait"] >= 0.5 * hold_s, report.phases
    # The wait is counted once: the phases still add up to no more than the wall time.
    assert sum(report.phases.values()) <= report.duration_s + 0.05, report.phases
