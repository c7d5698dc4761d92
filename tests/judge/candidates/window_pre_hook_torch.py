"""Class 1 (a window where guards were off): an autotune ``pre_hook`` runs inside Triton's
launch window; here it does the whole computation with torch into the output buffer, and the
Triton kernel writes nothing. Torch compute must be refused there as anywhere."""

import torch
import triton
import triton.language as tl


def _hook(nargs):
    x, y = nargs["x_ptr"], nargs["y_ptr"]
    y.copy_(torch.cumsum(x, dim=1) * nargs["scale"])


@triton.autotune(configs=[triton.Config({}, num_warps=1, pre_hook=_hook)], key=["T", "H"])
@triton.jit
def _idle_kernel(x_ptr, y_ptr, scale, T, H, BLOCK_T: tl.constexpr):
    pid = tl.program_id(0)
    tl.load(x_ptr + pid)


def kernel(x, scale):
    batch, steps, heads = x.shape
    y = torch.empty_like(x)
    _idle_kernel[(batch * heads,)](x, y, scale, steps, heads, BLOCK_T=triton.next_power_of_2(steps))
    return y
