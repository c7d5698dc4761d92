"""Class 3 (checked and timed calls told apart): honest for the first calls (the checks come
first), then outputs rounded to float16 inside Triton (2x the tolerance, once under a digest
bound of 6x it). Every timed output is now judged at the problem's tolerance."""

import torch
import triton
import triton.language as tl


@triton.jit
def _cumsum_kernel(x_ptr, y_ptr, scale, T, H, BLOCK_T: tl.constexpr, ROUND: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    t = tl.arange(0, BLOCK_T)
    mask = t < T
    offsets = b * T * H + t * H + h
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    y = tl.cumsum(x, axis=0) * scale
    if ROUND:
        y = y.to(tl.float16).to(tl.float32)
    tl.store(y_ptr + offsets, y, mask=mask)


_calls = [0]


def kernel(x, scale):
    batch, steps, heads = x.shape
    _calls[0] += 1
    y = torch.empty_like(x)
    _cumsum_kernel[(batch * heads,)](x, y, scale, steps, heads, BLOCK_T=triton.next_power_of_2(steps),
                                     ROUND=_calls[0] > 12)
    return y
