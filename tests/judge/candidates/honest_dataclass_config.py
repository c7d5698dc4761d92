"""Honest candidate in ordinary Python: a @dataclass launch plan, a frozen @dataclass config,
math and itertools on the host. The work is a Triton cumsum like honest_cumsum."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl


@dataclass(frozen=True)
class Config:
    num_warps: int = 1
    min_block: int = 16


@dataclass
class LaunchPlan:
    batch: int
    steps: int
    heads: int
    block_t: int = 0
    notes: list = field(default_factory=list)

    def __post_init__(self):
        self.block_t = max(CONFIG.min_block, 2 ** math.ceil(math.log2(max(self.steps, 1))))

    @property
    def grid(self):
        return (self.batch * self.heads,)


CONFIG = Config()


@triton.jit
def _cumsum_kernel(x_ptr, y_ptr, scale, T, H, BLOCK_T: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    t = tl.arange(0, BLOCK_T)
    mask = t < T
    offsets = b * T * H + t * H + h
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    y = tl.cumsum(x, axis=0) * scale
    tl.store(y_ptr + offsets, y, mask=mask)


def kernel(x, scale):
    plan = LaunchPlan(*x.shape)
    # itertools on the host: nothing computed with torch, just checking the layout.
    assert all(a >= b for a, b in itertools.pairwise(x.stride())), "expects a contiguous input"
    y = torch.empty_like(x)
    _cumsum_kernel[plan.grid](x, y, scale, plan.steps, plan.heads, BLOCK_T=plan.block_t,
                              num_warps=CONFIG.num_warps)
    return y
