"""Class 2 (a thread the guards do not see): ``_thread.start_new_thread`` raises no audit
event on Python 3.11, the thread count of ``threading`` does not include it, and torch's
dispatch mode is per thread, so torch compute in that thread was never refused. The thread
is started from an autotune ``pre_hook`` (inside Triton's launch window, where the module
guard steps aside, so ``torch.cuda.threading`` is reachable) and does the call's work with
torch while the Triton kernel idles."""

import torch
import triton
import triton.language as tl

_done = []


def _work(x, y, scale):
    y.copy_(torch.cumsum(x, dim=1) * scale)
    _done.append(1)


def _hook(nargs):
    start = torch.cuda.threading._start_new_thread
    start(_work, (nargs["x_ptr"], nargs["y_ptr"], nargs["scale"]))


@triton.autotune(configs=[triton.Config({}, num_warps=1, pre_hook=_hook)], key=["T", "H"])
@triton.jit
def _idle_kernel(x_ptr, y_ptr, scale, T, H, BLOCK_T: tl.constexpr):
    tl.load(x_ptr + tl.program_id(0))


def kernel(x, scale):
    batch, steps, heads = x.shape
    y = torch.empty_like(x)
    before = len(_done)
    _idle_kernel[(batch * heads,)](x, y, scale, steps, heads, BLOCK_T=triton.next_power_of_2(steps))
    while len(_done) == before:
        pass
    return y
