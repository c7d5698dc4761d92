"""How busy the GPU was while this process evaluated candidates, measured with NVML.

A ``BusySampler`` per GPU (one per process and device index, ``sampler_for``) reads the GPU's
utilisation (the fraction of time a kernel ran, NVML's ``utilization.gpu``) about every 0.2 s
into a bounded ring buffer of ``(monotonic s, utilisation 0..1 or None, evaluations active)``.
An evaluation opens a window (``begin``) before the judgement and closes it (``end``) after;
``end`` integrates the samples over the window:

- ``gpu_busy_s`` = sum over the window's segments of ``utilisation * seconds / evaluations
  active``: the busy GPU-seconds this evaluation accounts for. Dividing by the evaluations
  active means that summing the windows of concurrent evaluations never counts a busy second
  twice (their sum is at most the GPU's busy time).
- ``wall_share_s`` = sum of ``seconds / evaluations active``: the GPU-seconds the evaluation
  accounts for, busy or not. Summed over attempts it is, per GPU, the time at least one
  evaluation ran, so ``sum(gpu_busy_s) / sum(wall_share_s)`` is the GPU's busy fraction while it
  was evaluating, with any concurrency and any number of GPUs (``store/busy.py``).
- ``wall_s``: the window's wall seconds.

The segments are exact in the count: ``begin`` and ``end`` take a sample themselves, under the
lock, before they change the count, so the count is constant over each segment (a sample's count
is the one that held over the segment it ends). The utilisation is NVML's: averaged by the driver
over its own sample period (1/6 s to 1 s depending on the GPU), so a segment's value is an
approximation of that segment's busy fraction, good over windows of seconds. Only this process's
evaluations are counted: another process on the same GPU makes it look busier.

Without NVML (a CPU machine, CI, a GPU named by UUID) ``gpu_busy_s`` is None with the reason;
nothing here raises into the evaluation.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

SAMPLE_EVERY_S = 0.2
# An hour of samples at 0.2 s (a few MB): longer than an evaluation and its confirmation.
RING_SAMPLES = 18_000
# A window with more of its time unread than this says "unmeasured" rather than a low figure.
UNMEASURED_LIMIT = 0.1
NVML_LIBRARY = "libnvidia-ml.so.1"
NO_DEVICE = "no GPU to measure (the worker evaluates on the CPU, or CUDA_VISIBLE_DEVICES names no GPU by index)"


class BusyUnavailable(Exception):
    """The utilisation cannot be read here; the message says why."""


def gpu_index(environ: Mapping[str, str]) -> Optional[int]:
    """The NVML index of the GPU a worker started with ``environ`` uses: the first entry of
    CUDA_VISIBLE_DEVICES when it is a number, 0 when it is unset, None when it names no GPU or
    names it by UUID (guessing 0 there could measure another worker's GPU).

    NVML numbers GPUs in PCI bus order, as ``nvidia-smi`` and ``marathon up`` (``marathon/gpus.py``)
    do; CUDA does too on a machine of one GPU model (or with CUDA_DEVICE_ORDER=PCI_BUS_ID)."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return 0
    first = value.split(",")[0].strip()
    return int(first) if first.isdigit() else None


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class NvmlUtilization:
    """NVML through ctypes (no Python binding to install): ``read()`` is GPU ``index``'s
    utilisation as a fraction. Raises BusyUnavailable when the library or the device is missing."""

    def __init__(self, index: int, library: str = NVML_LIBRARY) -> None:
        if index < 0:
            raise ValueError(f"a GPU index is >= 0, got {index}")
        try:
            self._nvml = ctypes.CDLL(library)
        except OSError as error:
            raise BusyUnavailable(f"NVML is not available ({library}: {error})") from None
        self._nvml.nvmlErrorString.restype = ctypes.c_char_p
        self._check("nvmlInit_v2", self._nvml.nvmlInit_v2())
        self._handle = ctypes.c_void_p()
        try:
            self._check(
                f"nvmlDeviceGetHandleByIndex_v2({index})",
                self._nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(self._handle)),
            )
            self.read()  # a GPU without utilisation counters (MIG, some vGPUs) says so now
        except BusyUnavailable:
            self.close()
            raise

    def _check(self, call: str, code: int) -> None:
        if code != 0:
            text = self._nvml.nvmlErrorString(code) or b"unknown error"
            raise BusyUnavailable(f"NVML {call} failed: {text.decode(errors='replace')} (code {code})")

    def read(self) -> float:
        rates = _Utilization()
        self._check("nvmlDeviceGetUtilizationRates", self._nvml.nvmlDeviceGetUtilizationRates(self._handle,
                                                                                             ctypes.byref(rates)))
        return rates.gpu / 100.0

    def close(self) -> None:
        self._nvml.nvmlShutdown()


@dataclass(frozen=True)
class BusyFigures:
    """One window's figures, in seconds. ``gpu_busy_s`` is None when it could not be measured
    (``reason`` says why)."""

    wall_s: float
    wall_share_s: float
    gpu_busy_s: Optional[float]
    reason: str = ""


class Window:
    """One evaluation's window, from ``BusySampler.begin``; ``end`` closes it once."""

    def __init__(self, key: int, began: float, began_sample: int) -> None:
        self.key = key
        self.began = began  # monotonic seconds
        self.began_sample = began_sample  # the number of the sample ``begin`` took
        self.figures: Optional[BusyFigures] = None


class BusySampler:
    """The samples of one GPU and the windows open on it.

    ``open_source`` returns the function that reads the utilisation (0..1); it is called once, at
    the first ``begin``, and may raise (the reason is kept, the figures say unmeasured). None means
    there is nothing to measure (``reason``). ``thread`` False leaves sampling to the caller
    (tests call ``sample``); ``clock`` is monotonic seconds."""

    def __init__(
        self,
        open_source: Optional[Callable[[], Callable[[], float]]],
        *,
        reason: str = NO_DEVICE,
        interval_s: float = SAMPLE_EVERY_S,
        capacity: int = RING_SAMPLES,
        clock: Callable[[], float] = time.monotonic,
        thread: bool = True,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"the sample interval must be > 0 s, got {interval_s}")
        if capacity < 2:
            raise ValueError(f"the ring buffer needs room for >= 2 samples, got {capacity}")
        self._open_source = open_source
        self._reason = "" if open_source is not None else reason
        self._read: Optional[Callable[[], float]] = None
        self._opened = False
        self._interval_s = interval_s
        self._clock = clock
        self._use_thread = thread
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._samples: deque[tuple[float, Optional[float], int]] = deque(maxlen=capacity)
        self._active: set[int] = set()
        self._keys = itertools.count()
        self._taken = 0  # samples taken so far; the ring holds the last len(self._samples)

    # -- the windows -------------------------------------------------------------------------

    def begin(self) -> Window:
        """Open a window now (its sample closes the segment before it, with the count before it)."""
        with self._lock:
            self._open()
            sample = self._take()
            window = Window(next(self._keys), self._samples[-1][0], sample)
            self._active.add(window.key)
            return window

    def end(self, window: Window) -> BusyFigures:
        """Close ``window`` now and return its figures; a second call returns the same figures."""
        with self._lock:
            if window.figures is None:
                ended = self._take()
                self._active.discard(window.key)
                window.figures = self._integrate(window, ended)
            return window.figures

    @property
    def open_windows(self) -> int:
        """How many windows are open now (evaluations in progress in this process)."""
        with self._lock:
            return len(self._active)

    # -- sampling ------------------------------------------------------------------------------

    def sample(self) -> None:
        """Take one sample if an evaluation is open (samples with none open would count for nobody)."""
        with self._lock:
            if self._active:
                self._take()

    def _take(self) -> int:
        """Append (now, utilisation, evaluations active) with the lock held; return its number."""
        utilisation: Optional[float] = None
        if self._read is not None:
            try:
                value = float(self._read())
                utilisation = value if 0.0 <= value <= 1.0 else None
            except Exception:
                utilisation = None  # one failed read leaves its segment unmeasured
        self._samples.append((self._clock(), utilisation, len(self._active)))
        self._taken += 1
        return self._taken

    def _open(self) -> None:
        if self._opened:
            return
        self._opened = True
        if self._open_source is None:
            return
        try:
            self._read = self._open_source()
        except Exception as error:
            self._reason = str(error) or type(error).__name__
            return
        if self._use_thread:
            self._thread = threading.Thread(target=self._run, name="gpu-busy-sampler", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.sample()

    def close(self) -> None:
        """Stop the sampling thread (the process's samplers otherwise live as long as it does)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        closer = getattr(getattr(self._read, "__self__", None), "close", None)
        if callable(closer):
            closer()

    # -- the integral --------------------------------------------------------------------------

    def _integrate(self, window: Window, ended: int) -> BusyFigures:
        """The figures of ``window``, which the sample ``ended`` closes: the samples after its
        first one each end one of its segments."""
        first = window.began_sample
        kept = min(len(self._samples), ended - first + 1)  # the ring may have dropped the oldest
        samples = list(itertools.islice(reversed(self._samples), kept))[::-1]
        share = busy = unmeasured = 0.0
        if ended - first + 1 > kept:
            # The ring dropped the window's first samples: the time up to the oldest kept is unmeasured.
            seconds = samples[0][0] - window.began
            unmeasured += seconds
            share += seconds / max(samples[0][2], 1)
        for (before, _, _), (when, utilisation, active) in zip(samples, samples[1:]):
            seconds = max(0.0, when - before)
            shared = seconds / max(active, 1)
            share += shared
            if utilisation is None:
                unmeasured += seconds
            else:
                busy += utilisation * shared
        wall = max(0.0, samples[-1][0] - window.began)
        if self._read is None:
            return BusyFigures(wall, share, None, self._reason or NO_DEVICE)
        if unmeasured > UNMEASURED_LIMIT * wall:
            return BusyFigures(wall, share, None, f"no GPU utilisation reading for {unmeasured:.1f} of {wall:.1f} s")
        return BusyFigures(wall, share, busy)


_samplers: dict[Optional[int], BusySampler] = {}
_samplers_lock = threading.Lock()


def sampler_for(index: Optional[int]) -> BusySampler:
    """This process's sampler of GPU ``index`` (None: nothing to measure); NVML is opened and the
    sampling thread started at its first window, not here."""
    with _samplers_lock:
        sampler = _samplers.get(index)
        if sampler is None:
            source = None if index is None else (lambda: NvmlUtilization(index).read)
            sampler = _samplers[index] = BusySampler(source)
        return sampler


def result_fields(figures: BusyFigures, phases: Mapping[str, float]) -> dict[str, Optional[float]]:
    """The ``EvaluateResult`` fields of one evaluation: its window's figures and the seconds the
    candidate held the GPU for timing (the judge report's ``phases["timing"]``; absent on CPU)."""
    timing = phases.get("timing", 0.0) if isinstance(phases, Mapping) else 0.0
    return {
        "wall_s": round(figures.wall_s, 3),
        "wall_share_s": round(figures.wall_share_s, 3),
        "gpu_busy_s": None if figures.gpu_busy_s is None else round(figures.gpu_busy_s, 3),
        "timing_s": round(float(timing), 3) if isinstance(timing, (int, float)) else 0.0,
    }
