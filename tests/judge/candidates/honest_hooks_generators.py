"""Honest candidate in ordinary Python: an autotune ``pre_hook`` that zeroes its workspace (as
split-K kernels do), a generator choosing the block size, a frozen dataclass for the launch
plan, a module-level cache of plans, and two Triton kernels."""

from dataclasses import dataclass

import torch
import triton
import triton.language as tl


def _zero_workspace(nargs):
    nargs["w_ptr"].zero_()


@triton.autotune(configs=[triton.Config({}, num_warps=1, pre_hook=_zero_workspace)], key=["T", "H"])
@triton.jit
def _cumsum_kernel(x_ptr, w_ptr, T, H, BLOCK_T: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    t = tl.arange(0, BLOCK_T)
    mask = t < T
    offsets = b * T * H + t * H + h
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(w_ptr + offsets, tl.cumsum(x, axis=0) + tl.load(w_ptr + offsets, mask=mask, other=0.0), mask=mask)


@triton.jit
def _scale_kernel(w_ptr, y_ptr, scale, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < N
    tl.store(y_ptr + offsets, tl.load(w_ptr + offsets, mask=mask) * scale, mask=mask)


@dataclass(frozen=True)
class Plan:
    block_t: int
    block: int


def _powers_of_two(start):
    size = start
    while True:
        yield size
        size *= 2


def _first_at_least(n):
    for size in _powers_of_two(16):
        if size >= n:
            return size
    return n


_plans = {}


def _plan(steps):
    if steps not in _plans:
        _plans[steps] = Plan(block_t=_first_at_least(steps), block=128)
    return _plans[steps]


def kernel(x, scale):
    batch, steps, heads = x.shape
    plan = _plan(steps)
    work = torch.empty_like(x)
    _cumsum_kernel[(batch * heads,)](x, work, steps, heads, BLOCK_T=plan.block_t)
    y = torch.empty_like(x)
    n = x.numel()
    _scale_kernel[(triton.cdiv(n, plan.block),)](work, y, scale, n, BLOCK=plan.block)
    return y
