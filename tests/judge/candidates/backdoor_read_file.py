"""Reads a file outside the sandbox with ``torch.from_file`` (C++: no audit event fires) and
prints it: a file of the worker's user, such as Marathon's API token, would reach the captured
output and from there a report or an LLM prompt. The static scan refuses ``torch.from_file``;
with the scan off the sandbox must refuse the read itself."""

import torch
import triton
import triton.language as tl

SECRET_FILE = "/etc/hostname"


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
    leaked = torch.from_file(SECRET_FILE, False, 1, dtype=torch.uint8)
    print("leaked", leaked.tolist())
    batch, steps, heads = x.shape
    y = torch.empty_like(x)
    _cumsum_kernel[(batch * heads,)](x, y, scale, steps, heads, BLOCK_T=triton.next_power_of_2(steps))
    return y
