"""The H200's ceilings and the roofline built on them: the one home of both.

"Roofline" is the least time a shape can take on the card: the larger of its compute time at
the peak rate and its memory time at the peak bandwidth. Two sets of ceilings exist, and every
number says which it used:

- ``DATASHEET``: NVIDIA's H200 SXM datasheet, 989 TFLOP/s dense bf16/fp16 tensor-core rate and
  4.8 TB/s of HBM3e. No kernel can beat it, so the judge builds its physical floor on it: a time
  below half that floor is impossible, not fast, and the judge's roofline fraction is the share
  of that floor a kernel reaches. Every dtype is held to the bf16 rate, so the floor stays
  generous whatever precision a candidate computes in.
- ``MEASURED``: what the card reaches in practice, measured on the project's H200 (a dense bf16
  matmul at 680-790 TFLOP/s, a device-to-device copy at 4.28 TB/s): 790 TFLOP/s bf16/fp16,
  395 TFLOP/s fp32 (TF32) and 4.3 TB/s. ``kernels.bench``'s "% roof" column uses it: how close a
  kernel comes to what the card really does (BENCHMARKS.md quotes its figures against it).

One FLOP and byte convention: a problem's ``flops`` and ``bytes_moved`` formulas take
``(shape, dtype)`` and ``work`` always calls them so.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Mapping

from kernels.problem import Problem, Shape


@dataclass(frozen=True)
class Ceilings:
    """A card's peak rates: dense tensor-core TFLOP/s per dtype and memory bandwidth in TB/s."""

    source: str
    tflops: Mapping[str, float]
    bandwidth_tbs: float

    def peak_tflops(self, dtype: str) -> float:
        """The rate for ``dtype``; a dtype without its own figure gets the bf16 rate."""
        return self.tflops.get(dtype, self.tflops["bfloat16"])

    def floor_ms(self, flops: float, nbytes: float, dtype: str) -> float:
        """The roofline time of ``flops`` and ``nbytes`` in ``dtype`` on these ceilings, in ms."""
        return floor_ms(flops, nbytes, self.peak_tflops(dtype), self.bandwidth_tbs)

    def describe(self, dtype: str) -> str:
        return f"{self.peak_tflops(dtype):g} TFLOP/s and {self.bandwidth_tbs:g} TB/s (H200 {self.source})"


DATASHEET = Ceilings(source="datasheet", tflops={"bfloat16": 989.0}, bandwidth_tbs=4.8)
MEASURED = Ceilings(
    source="measured", tflops={"bfloat16": 790.0, "float16": 790.0, "float32": 395.0}, bandwidth_tbs=4.3
)


def floor_ms(flops: float, nbytes: float, peak_tflops: float, bandwidth_tbs: float) -> float:
    """The floor: the larger of compute time and memory time, in milliseconds."""
    if flops < 0 or nbytes < 0 or peak_tflops <= 0 or bandwidth_tbs <= 0:
        raise ValueError(
            f"roofline needs flops, bytes >= 0 and positive ceilings; got flops={flops}, bytes={nbytes}, "
            f"peak={peak_tflops} TFLOP/s, bandwidth={bandwidth_tbs} TB/s"
        )
    return max(flops / (peak_tflops * 1e12), nbytes / (bandwidth_tbs * 1e12)) * 1e3


def fraction(floor: float, ms: float) -> float:
    """The roofline fraction of a kernel that took ``ms``: ``floor / ms`` (1.0 is on the roofline)."""
    if not ms > 0 or floor < 0:
        raise ValueError(f"a roofline fraction needs a time > 0 and a floor >= 0, got {ms} ms and floor {floor} ms")
    return floor / ms


def _check_formula(problem: Problem, name: str, formula: Any) -> None:
    try:
        inspect.signature(formula).bind((1,), "bfloat16")
    except TypeError:
        raise ValueError(f"problem {problem.name!r}: {name} must take (shape, dtype), like every problem's") from None
    except ValueError:
        pass  # a builtin without a signature: call it and see


def work(problem: Problem, shape: Shape, dtype: str) -> tuple[float, float]:
    """(FLOPs, bytes moved) of one call of ``problem`` at ``shape`` in ``dtype``."""
    _check_formula(problem, "flops", problem.flops)
    _check_formula(problem, "bytes_moved", problem.bytes_moved)
    return float(problem.flops(shape, dtype)), float(problem.bytes_moved(shape, dtype))


def limit(problem: Problem, shape: Shape, dtype: str, ceilings: Ceilings) -> str:
    """Which ceiling sets the floor of ``problem`` at ``shape``: "memory" when moving its bytes at
    the peak bandwidth takes at least as long as its FLOPs at the peak rate, else "compute"."""
    flops, nbytes = work(problem, shape, dtype)
    compute_s = flops / (ceilings.peak_tflops(dtype) * 1e12)
    return "memory" if nbytes / (ceilings.bandwidth_tbs * 1e12) >= compute_s else "compute"


def problem_floor_ms(problem: Problem, shape: Shape, dtype: str, ceilings: Ceilings) -> float:
    """The roofline time of one call of ``problem`` at ``shape`` on ``ceilings``, in ms."""
    flops, nbytes = work(problem, shape, dtype)
    return ceilings.floor_ms(flops, nbytes, dtype)
