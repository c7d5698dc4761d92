"""Cheat: smuggles precomputed floats in through a literal tensor (torch.tensor is allowed for
integer plans only), launching a Triton kernel to look busy."""

import torch
import triton
import triton.language as tl


@triton.jit
def _touch(y_ptr):
    tl.store(y_ptr, tl.load(y_ptr))


def kernel(x, scale):
    table = torch.tensor([0.5, 1.5], dtype=torch.float32, device=x.device)
    _touch[(1,)](table)
    return x
