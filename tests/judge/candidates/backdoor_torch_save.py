"""Writes outside the sandbox with ``torch.save`` (a file another process, or a later judgement,
could read). The static scan refuses ``torch.save``; with the scan off the sandbox must refuse
the write at run time."""

import torch
import triton
import triton.language as tl

TARGET = "/tmp/marathon-judge-escape-torch-save.pt"


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
    torch.save(x, TARGET)
    batch, steps, heads = x.shape
    y = torch.empty_like(x)
    _cumsum_kernel[(batch * heads,)](x, y, scale, steps, heads, BLOCK_T=triton.next_power_of_2(steps))
    return y
