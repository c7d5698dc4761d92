"""Plants a file in the shared Triton cache through Triton's own cache manager.

A later judgement (another candidate, or the seed kernel) whose kernel hashes to the planted key
would load whatever binary was left there. The static scan refuses ``.runtime``; with the scan
off the sandbox must refuse the write itself: files may be written only inside the sandbox's
own directory, except by Triton while it compiles a launch.
"""

import torch
import triton
import triton.language as tl

PLANTED_KEY = "deadbeef" * 8  # a cache key is 64 hex digits


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
    triton.runtime.cache.get_cache_manager(PLANTED_KEY).put(b"not a kernel", "planted.cubin")
    batch, steps, heads = x.shape
    y = torch.empty_like(x)
    _cumsum_kernel[(batch * heads,)](x, y, scale, steps, heads, BLOCK_T=triton.next_power_of_2(steps))
    return y
