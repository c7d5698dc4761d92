"""Exploit 1c (NaN in the output): right everywhere except the last time step, which is NaN.

NaN compares false with everything: a check written ``error > tolerance`` lets a NaN error
through, and ``allclose`` without ``equal_nan`` care may too. The NaN is computed in Triton
(0/0), deterministically, so poisoning memory has nothing to do with it.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _cumsum_nan_kernel(x_ptr, y_ptr, scale, T, H, BLOCK_T: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    t = tl.arange(0, BLOCK_T)
    mask = t < T
    offsets = b * T * H + t * H + h
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    y = tl.cumsum(x, axis=0) * scale
    zero = y - y
    y = tl.where(t == T - 1, zero / zero, y)
    tl.store(y_ptr + offsets, y, mask=mask)


def kernel(x, scale):
    batch, steps, heads = x.shape
    y = torch.empty_like(x)
    _cumsum_nan_kernel[(batch * heads,)](x, y, scale, steps, heads, BLOCK_T=triton.next_power_of_2(steps))
    return y
