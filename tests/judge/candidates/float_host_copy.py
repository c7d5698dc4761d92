"""Cheat: computes the answer in PyTorch after moving the input to float64 (a float conversion
is not an integer move: still refused), launching a Triton kernel to look busy."""

import torch
import triton
import triton.language as tl


@triton.jit
def _touch(y_ptr):
    tl.store(y_ptr, tl.load(y_ptr))


def kernel(x, scale):
    wide = x.to(torch.float64)
    y = (wide.cumsum(1) * scale).to(x.dtype)
    _touch[(1,)](y)
    return y
