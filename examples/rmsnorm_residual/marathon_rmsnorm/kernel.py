"""Fused residual add + RMSNorm in Triton: the seed kernel, and the template of every candidate.

One program per row. A first pass over the row accumulates the sum of squares of
``x + residual`` in fp32, ``BLOCK_D`` columns at a time; a second pass normalizes, scales by
``weight`` and stores. The ``CONFIG`` literal holds the knobs (``space.py`` rewrites it).
"""

import torch
import triton
import triton.language as tl

CONFIG = {
    "block_d": 256,
    "num_warps": 4,
}

EPS = 1e-6


@triton.jit
def _rmsnorm_residual(x_ptr, r_ptr, w_ptr, y_ptr, width, eps, stride_x, stride_r, stride_y,
                      BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * stride_x
    r_row = r_ptr + row * stride_r
    squares = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(0, width, BLOCK_D):
        cols = start + tl.arange(0, BLOCK_D)
        mask = cols < width
        h = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        h += tl.load(r_row + cols, mask=mask, other=0.0).to(tl.float32)
        squares += h * h
    rstd = 1.0 / tl.sqrt(tl.sum(squares, axis=0) / width + eps)
    for start in range(0, width, BLOCK_D):
        cols = start + tl.arange(0, BLOCK_D)
        mask = cols < width
        h = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        h += tl.load(r_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = h * rstd * w
        tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def kernel(x, residual, weight):
    """x, residual [N, D], weight [D] -> y [N, D] in x's dtype."""
    x, residual, weight = x.contiguous(), residual.contiguous(), weight.contiguous()
    rows, width = x.shape
    y = torch.empty_like(x)
    _rmsnorm_residual[(rows,)](x, residual, weight, y, width, EPS, x.stride(0), residual.stride(0), y.stride(0),
                               BLOCK_D=CONFIG["block_d"], num_warps=CONFIG["num_warps"])
    return y
