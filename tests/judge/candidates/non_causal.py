"""Causality cheat: a correct-looking scan that lets the last (future) value leak into every output, far below the tolerance."""

import torch
import triton
import triton.language as tl


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


@triton.jit
def _touch_kernel(y_ptr):
    tl.store(y_ptr, tl.load(y_ptr))


def _honest(x, scale):
    batch, steps, heads = x.shape
    y = torch.empty_like(x)
    _cumsum_kernel[(batch * heads,)](x, y, scale, steps, heads, BLOCK_T=triton.next_power_of_2(steps))
    return y


@triton.jit
def _leaky_kernel(x_ptr, y_ptr, scale, T, H, BLOCK_T: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    t = tl.arange(0, BLOCK_T)
    mask = t < T
    offsets = b * T * H + t * H + h
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    future = tl.sum(x, axis=0)
    # The leak scales with the output, so it stays below the tolerance in every input regime.
    y = (tl.cumsum(x, axis=0) + future * 1.5e-6) * scale
    tl.store(y_ptr + offsets, y, mask=mask)


def kernel(x, scale):
    batch, steps, heads = x.shape
    y = torch.empty_like(x)
    _leaky_kernel[(batch * heads,)](x, y, scale, steps, heads, BLOCK_T=triton.next_power_of_2(steps))
    return y
