"""Fused residual add + RMSNorm: the problem as data.

Rows of a transformer's residual stream: ``h = x + residual``, then each row is divided by its
root mean square and scaled per channel:

    y[n, :] = h[n, :] / sqrt(mean(h[n, :]^2) + eps) * weight,    eps = 1e-6

A shape is ``(N, D)``: N rows (tokens) of width D (the model width). Inputs: ``x`` and
``residual`` [N, D] at the problem's dtype, ``weight`` [D]. Output: ``y`` [N, D] at the input
dtype. Not causal: every output row depends on its own input row only.

Input distribution: ``x`` standard normal, ``residual`` normal with standard deviation 2 (the
residual stream outgrows each block's output), ``weight`` around 1 (1 + 0.1 N(0, 1)): a weight
of all ones would let a kernel that ignores it pass. Mixed in among those rows, each with
probability ``ODD_ROW_SHARE`` (and, from three rows on, each at least once): **zero rows**
(``x = -residual`` exactly: a padding token), **tiny rows** (RMS ``TINY_RMS`` = 2e-4, where
eps = 1e-6 moves the result by a factor of five) and **huge rows** (RMS ``HUGE_RMS`` = 300,
whose squares overflow float16). A kernel without eps returns NaN on a zero row and five times
the truth on a tiny one; one that squares in float16 overflows.

Regimes, each a wrong kernel the default draw lets through: ``zero-rows`` (every third row has
``residual = -x``, so ``h = 0`` there: a kernel that drops ``eps`` divides 0 by 0), ``offset``
(``x`` shifted by 3, so rows have a mean far from 0: a kernel that subtracts the mean, a
LayerNorm, is far off; with the default draw's near-zero means it is close).

Held out (regime ``"massive_activations"``, drawn only when a judgement asks for the held-out
family): a few channels a thousand times larger than the rest in most rows, as the massive
activations of LLM residual streams are.

Shape family (``vary_shape``): D stays as listed (kernels may specialise on the width); N is
drawn within +-25% of the listed N (+-``spread``), so row counts the list lacks appear.

The object paths below are built from ``__package__``, so the problem loads the same whether
its package is installed on its own or shipped inside Marathon.
"""

from __future__ import annotations

import random
from typing import Any

from kernels.problem import ELEMENT_BYTES, Problem, Shape, check_regime, dtype_name, regime_seed, vary_length

NAME = "rmsnorm-residual"
REGIMES = ("default", "zero-rows", "offset")
HELD_OUT = ("massive_activations",)
OFFSET = 3.0
RESIDUAL_STD = 2.0
WEIGHT_STD = 0.1
ODD_ROW_SHARE = 1.0 / 16  # probability of each odd kind of row: zero, tiny, huge
TINY_RMS = 2e-4
HUGE_RMS = 300.0
MASSIVE_CHANNELS = 4
MASSIVE_FACTOR = 1000.0


def _check_shape(shape: Shape) -> tuple[int, int]:
    if len(shape) != 2 or any(int(n) < 1 for n in shape):
        raise ValueError(f"a {NAME} shape is (N, D) with positive sizes, got {shape!r}")
    return int(shape[0]), int(shape[1])


def make_inputs(shape: Shape, seed: int, device: Any = "cpu", dtype: Any = "bfloat16",
                regime: str = "default") -> dict[str, Any]:
    """``x``, ``residual`` [N, D] and ``weight`` [D], drawn on the CPU from a generator seeded by
    ``(seed, regime)`` and then moved, so a seed gives the same values on every device."""
    import torch

    check_regime(regime, REGIMES + HELD_OUT)
    rows, width = _check_shape(shape)
    torch_dtype = getattr(torch, dtype_name(dtype))
    gen = torch.Generator(device="cpu").manual_seed(regime_seed(seed, regime))
    x = torch.randn(rows, width, generator=gen)
    residual = torch.randn(rows, width, generator=gen) * RESIDUAL_STD
    weight = 1.0 + WEIGHT_STD * torch.randn(width, generator=gen)
    if regime == "massive_activations":
        channels = torch.randperm(width, generator=gen)[:MASSIVE_CHANNELS]
        rows_hit = torch.rand(rows, generator=gen) < 0.75
        residual[rows_hit.nonzero()[:, :1], channels] *= MASSIVE_FACTOR
    else:
        x, residual = _odd_rows(x, residual, gen)
    if regime == "zero-rows":
        residual[::3] = -x[::3]  # exact in every dtype: rounding is symmetric
    elif regime == "offset":
        x = x + OFFSET
    return {name: t.to(device=device, dtype=torch_dtype) for name, t in
            (("x", x), ("residual", residual), ("weight", weight))}


def _odd_rows(x: Any, residual: Any, gen: Any) -> tuple[Any, Any]:
    """``x`` and ``residual`` with zero, tiny and huge rows mixed in (module docstring): each
    row's kind drawn, and from three rows on the first three of a random order forced to one
    of each kind."""
    import torch

    rows = x.shape[0]
    draw = torch.rand(rows, generator=gen)
    kind = torch.zeros(rows, dtype=torch.int64)  # 0 ordinary, 1 zero, 2 tiny, 3 huge
    for k in (1, 2, 3):
        kind[(draw >= (k - 1) * ODD_ROW_SHARE) & (draw < k * ODD_ROW_SHARE)] = k
    if rows >= 3:
        kind[torch.randperm(rows, generator=gen)[:3]] = torch.tensor([1, 2, 3])
    tiny, huge = kind == 2, kind == 3
    rms = (x.pow(2) + residual.pow(2)).mean(dim=1, keepdim=True).sqrt()  # about sqrt(5)
    x = torch.where(tiny[:, None], x * TINY_RMS / rms, torch.where(huge[:, None], x * HUGE_RMS / rms, x))
    residual = torch.where(tiny[:, None], residual * TINY_RMS / rms,
                           torch.where(huge[:, None], residual * HUGE_RMS / rms, residual))
    x = torch.where((kind == 1)[:, None], -residual, x)  # exactly: negation commutes with rounding
    return x, residual


def vary_shape(shape: Shape, rng: random.Random, spread: float = 0.25) -> Shape:
    """D as listed, N within +-``spread`` (at least 1)."""
    rows, width = _check_shape(shape)
    return (vary_length(rows, rng, spread), width)


def output(shape: Shape, dtype: str) -> tuple[Shape, str]:
    return _check_shape(shape), dtype_name(dtype)


def flops(shape: Shape, dtype: str = "bfloat16") -> float:
    """5 per element: the add, the square, its sum, the scaling by 1/rms and by weight."""
    rows, width = _check_shape(shape)
    return 5.0 * rows * width


def bytes_moved(shape: Shape, dtype: str = "bfloat16") -> float:
    """x and residual read once, y written once, weight read once."""
    rows, width = _check_shape(shape)
    return float(ELEMENT_BYTES[dtype_name(dtype)] * (3 * rows * width + width))


_HERE = __package__ or "marathon_rmsnorm"

PROBLEM = Problem(
    name=NAME,
    title="Fused residual add + RMSNorm: y = rmsnorm(x + residual) * weight",
    input_names=("x", "residual", "weight"),
    dims=("N", "D"),
    shapes={
        # Llama-style widths; batch-1 decode rows up to a prefill's worth.
        "bench": ((1, 4096), (64, 4096), (4096, 4096), (16384, 8192)),
        # Ragged row counts and widths that are not a multiple of any block size.
        "verify": ((1, 4096), (37, 1000), (513, 4096), (7, 8192), (130, 5120)),
        # Tiny, for the Triton interpreter: one program per row, each looping over its row.
        "cpu": ((3, 64), (5, 100), (2, 257)),
    },
    # bf16: rounding the output alone costs about 2e-3 relative RMS; the PyTorch baseline also
    # rounds the normalized row before the weight, about 3e-3 in all. fp32 runs in IEEE fp32.
    tolerance={"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5},
    make_inputs=make_inputs,
    output=output,
    flops=flops,
    bytes_moved=bytes_moved,
    reference=f"{_HERE}.reference:reference",
    reference_check=f"{_HERE}.reference:reference_by_norm",
    baselines=f"{_HERE}.baseline:baselines",
    ours=f"{_HERE}.kernel:kernel",
    space=f"{_HERE}.space",
    causal=None,
    notes="Memory-bound (5 flops per 6 bytes in bf16): the kernel's job is to read each row once from "
    "DRAM (the second pass should hit L2/L1) and launch once.",
    regimes=REGIMES,
    held_out=HELD_OUT,
    vary_shape=vary_shape,
)
