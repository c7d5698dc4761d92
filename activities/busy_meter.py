"""How busy a device was over a stretch of wall time: the GPU (NVML) or a stand-in's "device".

``activities/gpu_busy.py`` measures each evaluation's own window (busy while evaluating). This
meter answers the other question, the one a marathon's GPU-hours depend on: of the wall time
from A to B, what fraction had work of ours on the device, idle gaps between evaluations
included? It samples a utilisation source all the time (a thread, every ``interval_s``) into a
bounded ring of ``(monotonic s, utilisation 0..1)``, each sample the average over the time since
the one before (as NVML's ``utilization.gpu`` is, over the driver's own period);
``fraction(a, b)`` integrates the samples over [a, b].

The source is NVML's reading for a GPU (``nvml_source``) or a ``StandInDevice``: a CPU benchmark's
timed stand-in evaluator holds it while it "evaluates", and its reading is exact (the busy seconds
since the last reading over the seconds since). The same meter reads either, so the meter the GPU
uses is the one the CPU tests exercise.

``steady_window`` picks the stretch to read: from the first evaluation's end (the start-up, the
first proposal and the first dispatch, is over) to the last evaluation's start (the drain at the
end, when nothing is left to start, is not the loop's steady state).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from typing import Callable, Iterator, Optional, Sequence

SAMPLE_EVERY_S = 0.2
RING_SAMPLES = 36_000  # two hours at 0.2 s


class StandInDevice:
    """A stand-in evaluator's device: busy while some evaluation ``hold``s it. ``read`` is the
    fraction of the time since the previous ``read`` that it was busy (0..1)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._holders = 0
        self._busy_since: Optional[float] = None
        self._busy_s = 0.0  # busy seconds since the last read, up to _busy_since
        self._last_read = clock()

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        with self._lock:
            self._holders += 1
            if self._holders == 1:
                self._busy_since = self._clock()
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0 and self._busy_since is not None:
                    self._busy_s += self._clock() - self._busy_since
                    self._busy_since = None

    def read(self) -> float:
        with self._lock:
            now = self._clock()
            busy = self._busy_s
            if self._busy_since is not None:
                busy += now - self._busy_since
                self._busy_since = now
            elapsed, self._last_read, self._busy_s = now - self._last_read, now, 0.0
        return min(1.0, busy / elapsed) if elapsed > 0 else (1.0 if self._holders else 0.0)


def nvml_source(index: int) -> Callable[[], float]:
    """NVML's utilisation of GPU ``index`` (0..1); raises ``gpu_busy.BusyUnavailable`` without one."""
    from activities.gpu_busy import NvmlUtilization

    return NvmlUtilization(index).read


class BusyMeter:
    """Samples ``read`` (0..1) every ``interval_s`` from ``start()`` until ``close()``. With
    ``thread`` False the caller samples (tests call ``sample``)."""

    def __init__(self, read: Callable[[], float], *, interval_s: float = SAMPLE_EVERY_S,
                 capacity: int = RING_SAMPLES, clock: Callable[[], float] = time.monotonic,
                 thread: bool = True) -> None:
        if not interval_s > 0:
            raise ValueError(f"the sample interval must be > 0 s, got {interval_s}")
        if capacity < 2:
            raise ValueError(f"the ring needs room for >= 2 samples, got {capacity}")
        self._read, self._interval_s, self._clock, self._use_thread = read, interval_s, clock, thread
        self._samples: deque[tuple[float, Optional[float]]] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "BusyMeter":
        self.sample()  # the first sample only marks the start: its reading covers nothing of ours
        if self._use_thread:
            self._thread = threading.Thread(target=self._run, name="busy-meter", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.sample()

    def sample(self) -> None:
        try:
            value: Optional[float] = float(self._read())
        except Exception:
            value = None  # a failed read leaves its stretch unmeasured
        if value is not None and not 0.0 <= value <= 1.0:
            value = None
        with self._lock:
            self._samples.append((self._clock(), value))

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sample()

    def fraction(self, start: float, end: float) -> Optional[float]:
        """The busy fraction of [start, end] (monotonic seconds); None when less than 90 % of it
        was read (outside the samples, or failed reads)."""
        if not end > start:
            raise ValueError(f"a window ends after it starts, got {start} .. {end}")
        with self._lock:
            samples = list(self._samples)
        busy = measured = 0.0
        for (before, _), (when, value) in zip(samples, samples[1:]):
            overlap = min(when, end) - max(before, start)
            if overlap <= 0 or value is None:
                continue
            measured += overlap
            busy += value * overlap
        if measured < 0.9 * (end - start):
            return None
        return min(1.0, busy / measured)


def steady_window(intervals: Sequence[tuple[float, float]]) -> Optional[tuple[float, float]]:
    """(start, end) of the loop's steady state from its evaluations' (start, end) intervals: the
    first evaluation's end to the last evaluation's start; None when that is empty."""
    if not intervals:
        return None
    start = min(end for _, end in intervals)
    end = max(begin for begin, _ in intervals)
    return (start, end) if end > start else None
