"""Exploit 9 (precision downgrade): compute in Triton, store into a float16 buffer.

The values are right to fp16 rounding (about 5e-4 relative) and half the bytes are written;
the problem asks for float32. No cast runs in torch (the store converts), so the dispatch
mode sees nothing. The exact-dtype check stops it first; on a problem whose tolerance is
looser than fp16 rounding it is the only check that would.
"""

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


def kernel(x, scale):
    batch, steps, heads = x.shape
    y = torch.empty(x.shape, dtype=torch.float16, device=x.device)
    _cumsum_kernel[(batch * heads,)](x, y, scale, steps, heads, BLOCK_T=triton.next_power_of_2(steps))
    return y
