"""The per-GPU lease (kernels/judge/gpu_lease.py): shared work overlaps, timing is alone,
writers are not starved, and a killed holder frees the GPU."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from kernels.judge.gpu_lease import GpuLease, LeaseCancelled

HOLD_S = 0.4


def _hold(lease_path: str, exclusive: bool, events: list, name: str, entered: threading.Event | None = None,
          hold_s: float = HOLD_S) -> None:
    lease = GpuLease(lease_path)
    with (lease.exclusive() if exclusive else lease.shared()):
        events.append((name, "in", time.monotonic()))
        if entered is not None:
            entered.set()
        time.sleep(hold_s)
        events.append((name, "out", time.monotonic()))


def _interval(events: list, name: str) -> tuple[float, float]:
    start = next(t for n, kind, t in events if n == name and kind == "in")
    stop = next(t for n, kind, t in events if n == name and kind == "out")
    return start, stop


def test_shared_holders_overlap(tmp_path):
    path = str(tmp_path / "gpu.lease")
    events: list = []
    threads = [threading.Thread(target=_hold, args=(path, False, events, f"r{i}")) for i in range(3)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Three holds of 0.4 s side by side, not one after another.
    assert time.monotonic() - started < 2 * HOLD_S
    intervals = [_interval(events, f"r{i}") for i in range(3)]
    assert max(a for a, _ in intervals) < min(b for _, b in intervals)


def test_exclusive_is_alone(tmp_path):
    path = str(tmp_path / "gpu.lease")
    events: list = []
    entered = threading.Event()
    writer = threading.Thread(target=_hold, args=(path, True, events, "w", entered))
    writer.start()
    assert entered.wait(5)
    readers = [threading.Thread(target=_hold, args=(path, False, events, f"r{i}", None, 0.05)) for i in range(2)]
    for thread in readers:
        thread.start()
    for thread in [writer, *readers]:
        thread.join()
    w_in, w_out = _interval(events, "w")
    for i in range(2):
        r_in, r_out = _interval(events, f"r{i}")
        assert r_in >= w_out or r_out <= w_in, "a shared holder ran while the GPU was held for timing"


def test_a_waiting_writer_goes_before_later_readers(tmp_path):
    path = str(tmp_path / "gpu.lease")
    events: list = []
    first_reader = threading.Event()
    r0 = threading.Thread(target=_hold, args=(path, False, events, "r0", first_reader))
    r0.start()
    assert first_reader.wait(5)
    writer = threading.Thread(target=_hold, args=(path, True, events, "w", None, 0.1))
    writer.start()
    time.sleep(0.1)  # the writer is now waiting for r0
    late = threading.Thread(target=_hold, args=(path, False, events, "late", None, 0.05))
    late.start()
    for thread in (r0, writer, late):
        thread.join()
    w_in, w_out = _interval(events, "w")
    late_in, _ = _interval(events, "late")
    assert w_in >= _interval(events, "r0")[1]
    assert late_in >= w_out, "a reader that came after a waiting writer overtook it"


def test_a_killed_holder_frees_the_gpu(tmp_path):
    path = str(tmp_path / "gpu.lease")
    code = ("import sys, time; from kernels.judge.gpu_lease import GpuLease\n"
            f"lease = GpuLease({path!r})\n"
            "with lease.exclusive():\n    print('held', flush=True)\n    time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        stop_at = time.monotonic() + 0.5
        lease = GpuLease(path, should_stop=lambda: time.monotonic() > stop_at)
        with pytest.raises(LeaseCancelled):
            with lease.shared():
                pass
        # The wait starts a moment after stop_at is set, so it is a little under 0.5 s;
        # a lease that did not block at all would report about zero.
        assert lease.waited_s >= 0.4
        child.kill()
        child.wait(10)
        waiting = GpuLease(path)
        with waiting.shared():
            pass
        assert waiting.waited_s < 1.0
    finally:
        child.kill()


def test_lease_checks_its_folder(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        GpuLease(str(tmp_path / "missing" / "gpu.lease"))
    with pytest.raises(ValueError, match="empty"):
        GpuLease("")
