"""Honest candidate that writes every result into one persistent output buffer per shape (no
allocation per call). Each returned result is overwritten by the next call: the judge must
copy what it checks at once."""

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


_buffers = {}


def kernel(x, scale):
    batch, steps, heads = x.shape
    key = (tuple(x.shape), x.dtype, x.device)
    if key not in _buffers:
        _buffers[key] = torch.empty_like(x)
    y = _buffers[key]
    _cumsum_kernel[(batch * heads,)](x, y, scale, steps, heads, BLOCK_T=triton.next_power_of_2(steps))
    return y
