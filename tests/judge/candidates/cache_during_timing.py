"""Exploit 8, patient: honest during the correctness calls, then memoize by address once the
same buffers come back again and again (as they did in a timing loop). Since every timed call
gets fresh inputs, an address comes back only when the allocator reuses it, with other
values: a hit (printed) is then caught in that timed call, and no hit means honest work."""

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


@triton.jit
def _touch_kernel(y_ptr):
    tl.store(y_ptr, tl.load(y_ptr))


_seen = {}
_cache = {}


def kernel(x, scale):
    key = (x.data_ptr(), tuple(x.shape))
    _seen[key] = _seen.get(key, 0) + 1
    if key in _cache:
        print("cache hit", flush=True)
        _touch_kernel[(1,)](_cache[key])
        return _cache[key]
    batch, steps, heads = x.shape
    y = torch.empty_like(x)
    _cumsum_kernel[(batch * heads,)](x, y, scale, steps, heads, BLOCK_T=triton.next_power_of_2(steps))
    if _seen[key] >= 2:
        _cache[key] = y
    return y
