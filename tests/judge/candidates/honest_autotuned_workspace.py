"""Honest candidate: two @triton.jit kernels (a per-column cumsum into a cached workspace,
then a scaled copy out), the first under @triton.autotune, and a workspace buffer
cached in a module-level dict keyed by shape, dtype and device and reused across calls."""

import torch
import triton
import triton.language as tl


@triton.autotune(
    # One config: the CPU interpreter cannot benchmark several (Triton 3.9 has no interpreter
    # driver); honest_autotuned_gpu covers several configs on the GPU.
    configs=[triton.Config({}, num_warps=1)],
    key=["T", "H"],
)
@triton.jit
def _cumsum_kernel(x_ptr, w_ptr, T, H, BLOCK_T: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    t = tl.arange(0, BLOCK_T)
    mask = t < T
    offsets = b * T * H + t * H + h
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(w_ptr + offsets, tl.cumsum(x, axis=0), mask=mask)


@triton.jit
def _scale_kernel(w_ptr, y_ptr, scale, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < N
    tl.store(y_ptr + offsets, tl.load(w_ptr + offsets, mask=mask) * scale, mask=mask)


_workspaces = {}


def _workspace(x):
    key = (tuple(x.shape), x.dtype, x.device)
    if key not in _workspaces:
        _workspaces[key] = torch.empty_like(x)
    return _workspaces[key]


def kernel(x, scale):
    batch, steps, heads = x.shape
    work = _workspace(x)
    _cumsum_kernel[(batch * heads,)](x, work, steps, heads, BLOCK_T=triton.next_power_of_2(steps))
    y = torch.empty_like(x)
    n = x.numel()
    _scale_kernel[(triton.cdiv(n, 128),)](work, y, scale, n, BLOCK=128)
    return y
