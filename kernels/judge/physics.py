"""The physical floor of a problem shape on an H200, for roofline fractions and impossibility checks."""

from __future__ import annotations

from kernels.problem import Problem

# H200 datasheet peaks (dense bf16 tensor cores; HBM3e). Measured ceilings are lower
# (``../shared/ANCHORS.md``: 680-790 TFLOP/s, 4.28 TB/s), so a floor built on the datasheet
# is itself generous.
PEAK_FLOPS = 989e12
PEAK_BYTES_PER_S = 4.8e12
# A time below this fraction of the floor is impossible, not fast: the judge calls it suspicious.
IMPOSSIBLE_FRACTION = 0.5


def floor_ms(problem: Problem, shape: tuple[int, ...], dtype: str) -> float:
    """max(flops / peak, bytes / bandwidth) in milliseconds."""
    try:
        flops = float(problem.flops(shape, dtype))
    except TypeError:
        flops = float(problem.flops(shape))
    moved = float(problem.bytes_moved(shape, dtype))
    return max(flops / PEAK_FLOPS, moved / PEAK_BYTES_PER_S) * 1e3
