"""A tiny self-contained problem for ``marathon problem check``'s tests: y = scale * x.

Self-contained on purpose: the judge's sandbox reads this module's file and nothing else of
tests/. ``PROBLEM`` keeps the contract; ``WRONG_SEED`` differs only in its space, whose seed
kernel forgets the scale (the judge finds it incorrect). tests/problems/broken.py breaks the rest.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kernels.problem import Problem, regime_seed

SPACE: dict[str, tuple[Any, ...]] = {"block": (16, 32, 64)}
DEFAULT: dict[str, Any] = {"block": 32}

SEED = '''
import torch
import triton
import triton.language as tl

BLOCK = {block}


@triton.jit
def _scaled(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * {factor}, mask=mask)


def kernel(x, scale):
    y = torch.empty_like(x)
    _scaled[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), scale, BLOCK=BLOCK)
    return y
'''


def render(point: dict[str, Any]) -> str:
    return SEED.format(block=point["block"], factor="scale")


def make_inputs(shape, seed, device="cpu", dtype="float32", regime="default") -> dict[str, Any]:
    import torch

    gen = torch.Generator().manual_seed(regime_seed(seed, regime))
    x = torch.randn(shape[0], generator=gen)
    return {"x": x.to(device=device, dtype=getattr(torch, dtype)), "scale": 0.5 + float(torch.rand((), generator=gen))}


def reference(x, scale):
    return (x.double() * scale).float()


def reference_sum(x, scale):
    return (x.double() * scale * 0.5 + x.double() * scale * 0.5).float()


def baselines(device) -> dict[str, Any]:
    return {"eager": lambda x, scale: x * scale}


PROBLEM = Problem(
    name="scaled",
    title="y = scale * x (problem check tests)",
    input_names=("x", "scale"),
    dims=("N",),
    shapes={"verify": ((100,), (37,)), "bench": ((1 << 20,),), "cpu": ((100,), (37,))},
    tolerance={"float32": 1e-5, "bfloat16": 1e-2},
    make_inputs=make_inputs,
    output=lambda shape, dtype: (tuple(shape), dtype),
    flops=lambda shape, dtype="float32": float(shape[0]),
    bytes_moved=lambda shape, dtype="float32": 8.0 * shape[0],
    reference="tests.problems.scaled:reference",
    reference_check="tests.problems.scaled:reference_sum",
    baselines="tests.problems.scaled:baselines",
    ours="tests.problems.scaled:reference",
    space="tests.problems.scaled",
    cpu_dtype="float32",
)

WRONG_SEED = replace(PROBLEM, space="tests.problems.broken_space")
