"""Honest toy candidate that plans its launch from integer tensors, as FLA and serving engines
plan theirs from ``cu_seqlens``: a literal int tensor on the input's device, copied to the host
and read there. No float value leaves the kernel."""

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
    offsets = torch.tensor([0, steps, batch * heads], dtype=torch.int64, device=x.device)
    host = torch.empty(3, dtype=torch.int64)
    host.copy_(offsets)
    first, last, columns = (int(host[i]) for i in range(3))
    y = torch.empty_like(x)
    _cumsum_kernel[(columns,)](x, y, scale, last - first, heads, BLOCK_T=triton.next_power_of_2(steps))
    return y
