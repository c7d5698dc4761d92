"""A toy causal problem for the judge's tests: a scaled cumulative sum over time.

``y[b, t, h] = scale * sum_{s <= t} x[b, s, h]`` with ``x`` [B, T, H]. Tiny shapes keep the
Triton interpreter fast; the causal axis lets the judge's causality check bite.
Loaded as ``"tests.judge.toy:PROBLEM"``.

Regimes: ``"default"`` (``x`` standard normal, ``scale`` in [0.5, 1.5)) and ``"large"``
(``x`` times 1e3, ``scale`` log-uniform in [0.1, 10]). Shape family: B and H kept, T within
+-25% of the listed T (at least 1).
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

from kernels.problem import CausalAxis, Problem, Shape, check_regime, regime_seed, vary_length

CANDIDATES = Path(__file__).parent / "candidates"
_ELEMENT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

REGIMES = ("default", "large")
LARGE_FACTOR = 1e3

SPACE: dict[str, list[Any]] = {}
DEFAULT: dict[str, Any] = {}


def render(knobs: dict[str, Any]) -> str:
    """The honest seed candidate (the toy has no knobs)."""
    return (CANDIDATES / "honest_cumsum.py").read_text()


def make_inputs(
    shape: Shape, seed: int, device: Any = "cpu", dtype: Any = "float32", regime: str = "default"
) -> dict[str, Any]:
    """``x`` [B, T, H] and a positive ``scale``, drawn on the CPU from ``(seed, regime)``."""
    import torch

    check_regime(regime, REGIMES)
    batch, steps, heads = shape
    gen = torch.Generator(device="cpu").manual_seed(regime_seed(seed, regime))
    x = torch.randn(batch, steps, heads, generator=gen)
    if regime == "large":
        x = x * LARGE_FACTOR
        scale = 10.0 ** (2.0 * float(torch.rand(1, generator=gen)) - 1.0)
    else:
        scale = 0.5 + float(torch.rand(1, generator=gen))
    torch_dtype = getattr(torch, str(dtype).removeprefix("torch."))
    return {"x": x.to(device=device, dtype=torch_dtype), "scale": scale}


def vary_shape(shape: Shape, rng: random.Random) -> Shape:
    """B and H kept, T uniform within +-25% (at least 1)."""
    batch, steps, heads = shape
    return (batch, vary_length(steps, rng), heads)


def reference(x, scale):
    """fp64 cumulative sum, returned in the input dtype."""
    return (x.double().cumsum(dim=1) * scale).to(x.dtype)


def _torch_cumsum(x, scale):
    return x.cumsum(dim=1) * scale


def baselines(device: str) -> dict[str, Any]:
    return {"torch": _torch_cumsum}


def output(shape: Shape, dtype: str) -> tuple[Shape, str]:
    return tuple(shape), str(dtype).removeprefix("torch.")


def flops(shape: Shape, dtype: str = "float32") -> float:
    batch, steps, heads = shape
    return 2.0 * batch * steps * heads


def bytes_moved(shape: Shape, dtype: str = "float32") -> float:
    batch, steps, heads = shape
    return 2.0 * batch * steps * heads * _ELEMENT_BYTES[str(dtype).removeprefix("torch.")]


_SHAPES = ((2, 37, 3), (1, 64, 2))

PROBLEM = Problem(
    name="toy-cumsum",
    title="toy: scaled causal cumulative sum over time (judge tests)",
    input_names=("x", "scale"),
    dims=("B", "T", "H"),
    shapes={"verify": _SHAPES, "bench": ((4, 1024, 64),), "cpu": _SHAPES},
    tolerance={"float32": 1e-5, "bfloat16": 1e-2, "float16": 5e-3},
    make_inputs=make_inputs,
    output=output,
    flops=flops,
    bytes_moved=bytes_moved,
    reference="tests.judge.toy:reference",
    baselines="tests.judge.toy:baselines",
    ours="tests.judge.toy:reference",
    space="tests.judge.toy",
    gpu_dtype="float32",
    cpu_dtype="float32",
    causal=CausalAxis("T", {"x": 1}, 1),
    regimes=REGIMES,
    vary_shape=vary_shape,
)


def failing_baselines(device):
    """A baseline that runs out of memory, as a referee's work did on the H200 when four kda
    judgements shared one GPU: the judge's own failure, not the candidate's."""

    def baseline(**inputs):
        raise MemoryError("out of memory (a stand-in for CUDA's)")

    return {"failing": baseline}


FAILING_BASELINE = dataclasses.replace(PROBLEM, name="toy-failing-baseline",
                                       baselines="tests.judge.toy:failing_baselines")


# The toy with its bench shape launch-bound: judgements of it replay that shape from a CUDA graph
# (candidate and baseline), which the census check compares with its kernel time.
GRAPHED = dataclasses.replace(PROBLEM, name="toy-graphed", extra={"launch_bound_shapes": [[4, 1024, 64]]})
