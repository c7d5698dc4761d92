"""The physical floor of a problem shape on an H200, for roofline fractions and impossibility checks."""

from __future__ import annotations

from kernels import roofline
from kernels.problem import Problem

# The judge's floor is built on the datasheet ceilings (``kernels.roofline.DATASHEET``): the card
# measures lower (about 790 TFLOP/s and 4.3 TB/s), so a floor on the datasheet is itself generous.
CEILINGS = roofline.DATASHEET
# A time below this fraction of the floor is impossible, not fast: the judge calls it suspicious.
IMPOSSIBLE_FRACTION = 0.5


def floor_ms(problem: Problem, shape: tuple[int, ...], dtype: str) -> float:
    """max(flops / peak, bytes / bandwidth) in milliseconds, on the datasheet ceilings."""
    return roofline.problem_floor_ms(problem, shape, dtype, CEILINGS)


def limit(problem: Problem, shape: tuple[int, ...], dtype: str) -> str:
    """Which ceiling sets that floor: "memory" or "compute" (``kernels.roofline.limit``)."""
    return roofline.limit(problem, shape, dtype, CEILINGS)
