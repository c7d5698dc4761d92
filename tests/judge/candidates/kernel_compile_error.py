"""Compile error inside a Triton kernel body: tl.arange over a length that is not a power of 2.

Python parses it, so the source scan passes it; Triton's front end refuses it (a
CompilationError on a GPU, an InterpreterError from the CPU interpreter). Either way the
verdict must be compile_error and name the kernel line.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _cumsum_kernel(x_ptr, y_ptr, scale, T, H, BLOCK_T: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    t = tl.arange(0, BLOCK_T + 1)
    mask = t < T
    offsets = b * T * H + t * H + h
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    y = tl.cumsum(x, axis=0) * scale
    tl.store(y_ptr + offsets, y, mask=mask)


def kernel(x, scale):
    batch, steps, heads = x.shape
    y = torch.empty_like(x)
    _cumsum_kernel[(batch * heads,)](x, y, scale, steps, heads, BLOCK_T=triton.next_power_of_2(steps))
    return y
