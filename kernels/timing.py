"""GPU timing shared by the benchmark and the judge.

Rules every number obeys (BENCHMARKS.md reports numbers taken this way):
- the L2 cache (50 MB on an H200) is flushed before every repetition, or a 9 MB KV cache
  flatters itself;
- several providers are interleaved in one process on one GPU, with their order rotated
  each repetition, so a speedup is a ratio measured side by side;
- the whole device is synchronized around each call, so work left on a side stream is
  counted (``wall_ms``) even where the events of the current stream miss it;
- CUDA-graph replay, the way serving engines run decode, is a separate, labelled number.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

L2_FLUSH_BYTES = 256 * 1024 * 1024


@dataclass
class Samples:
    """Per-repetition times of one provider, in milliseconds."""

    event_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.event_ms)

    @property
    def median_wall_ms(self) -> float:
        return statistics.median(self.wall_ms)

    @property
    def spread(self) -> float:
        """(p80 - p20) / median: how noisy the repetitions were."""
        xs = sorted(self.event_ms)
        lo, hi = xs[int(0.2 * (len(xs) - 1))], xs[int(0.8 * (len(xs) - 1))]
        return (hi - lo) / max(self.median_ms, 1e-12)

    def summary(self) -> dict[str, float]:
        return {
            "median_ms": self.median_ms,
            "min_ms": min(self.event_ms),
            "spread": self.spread,
            "median_wall_ms": self.median_wall_ms,
            "reps": len(self.event_ms),
        }


class L2Flusher:
    """Overwrites a buffer larger than the L2 cache."""

    def __init__(self, device: str | torch.device = "cuda", nbytes: int = L2_FLUSH_BYTES):
        self.buffer = torch.empty(nbytes // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


def timed_call(fn: Callable[[], Any], device: str, flusher: "L2Flusher | None" = None) -> tuple[Any, float, float]:
    """One call of ``fn()``: (its output, event ms, synchronized wall ms).

    On a GPU the L2 cache is flushed and the device synchronized first, events bracket the
    call and the wall clock includes a device-wide synchronize (work left on another stream
    is counted there). On the CPU both times are the wall clock, the same clock as the
    batch's own ``batch_ms`` and the caller's clock around it, which bound this process's
    account (kernels/judge/scoring.py ``check_batch``). What decides a CPU speedup is never
    this account: it is the CPU time of the whole process tree, read from outside (the
    judgement's cgroup, kernels/judge/cgroups.py).
    """
    if device != "cuda":
        start = time.perf_counter()
        out = fn()
        elapsed = (time.perf_counter() - start) * 1e3
        return out, elapsed, elapsed
    if flusher is not None:
        flusher()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    start.record()
    out = fn()
    end.record()
    torch.cuda.synchronize()
    return out, start.elapsed_time(end), (time.perf_counter() - t0) * 1e3


def time_interleaved(
    providers: dict[str, Callable[..., Any]],
    input_sets: Sequence[dict[str, Any]],
    *,
    reps: int = 30,
    warmup: int = 3,
    flusher: L2Flusher | None = None,
) -> dict[str, Samples]:
    """Time each provider ``fn(**inputs)``, interleaved, rotating input sets and order.

    Args:
        providers: label -> callable taking the inputs by keyword.
        input_sets: several input dicts; repetition r uses set ``r % len(input_sets)``.
        reps: timed repetitions per provider.
        warmup: untimed calls per provider and input set before timing (compilation,
            autotuning).
    """
    if not providers:
        raise ValueError("time_interleaved needs at least one provider")
    if not input_sets:
        raise ValueError("time_interleaved needs at least one input set")
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    flusher = flusher or L2Flusher()
    for fn in providers.values():
        for inputs in input_sets:
            for _ in range(warmup):
                fn(**inputs)
    torch.cuda.synchronize()

    labels = list(providers)
    samples = {label: Samples() for label in labels}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for r in range(reps):
        inputs = input_sets[r % len(input_sets)]
        shift = r % len(labels)
        for label in labels[shift:] + labels[:shift]:
            flusher()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            start.record()
            providers[label](**inputs)
            end.record()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) * 1e3
            samples[label].event_ms.append(start.elapsed_time(end))
            samples[label].wall_ms.append(wall)
    return samples


def replay_ms(graph: torch.cuda.CUDAGraph, replays: int) -> float:
    """Milliseconds of ``replays`` back-to-back replays of a captured CUDA ``graph``, between events."""
    if replays < 1:
        raise ValueError(f"replays must be >= 1, got {replays}")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


# About how long one round of graph replays lasts in a judgement (``time_graph_replay``'s
# ``round_ms``): both sides of a shape get the same rule, and 5 rounds of 2 graphs stay near 0.2 s.
JUDGE_ROUND_MS = 20.0


def time_graph_replay(
    fn: Callable[..., Any],
    inputs: dict[str, Any],
    *,
    replays: int = 50,
    rounds: int = 5,
    flusher: L2Flusher | None = None,
    round_ms: float | None = None,
) -> Samples:
    """Per-call time of ``fn(**inputs)`` replayed from a CUDA graph, L2 flushed each call.

    Two graphs are captured: (flush; fn) and (flush) alone. Each is replayed ``replays``
    times between events; the per-call time is the difference divided by ``replays``, so
    the flush is inside the graph but not in the number. Returns one sample per round.
    ``round_ms``: when given, ``replays`` is only the most; fewer are made where one replay is
    long, so a round lasts about ``round_ms`` (at least 3 replays): a judge that replays every
    bench shape keeps a 5 ms call from costing seconds, while a microsecond call keeps its 50.
    """
    flusher = flusher or L2Flusher()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn(**inputs)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()

    with_fn, flush_only = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(with_fn):
        flusher()
        fn(**inputs)
    with torch.cuda.graph(flush_only):
        flusher()
    torch.cuda.synchronize()

    first = replay_ms(with_fn, 1)  # also the warm-up replay
    if round_ms is not None:
        replays = max(3, min(replays, int(round_ms / max(first, 1e-6))))
    result = Samples()
    for _ in range(rounds):
        total = replay_ms(with_fn, replays) - replay_ms(flush_only, replays)
        result.event_ms.append(max(total, 0.0) / replays)
        result.wall_ms.append(result.event_ms[-1])
    return result


def geomean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("geomean of no values")
    if any(v <= 0 for v in values):
        raise ValueError(f"geomean needs positive values, got {list(values)}")
    return statistics.geometric_mean(values)
