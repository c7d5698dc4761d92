"""Class 3 (checked and timed calls told apart by the caller's stack): the depth of the stack
at the first call is the checked depth; a call from any other depth is taken for a timed one
and rounded to float16. Every call now comes through the same frames, and every timed
output is judged, so the trick either never fires or is caught."""

import torch
import triton
import triton.language as tl


@triton.jit
def _cumsum_kernel(x_ptr, y_ptr, scale, T, H, BLOCK_T: tl.constexpr, ROUND: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    t = tl.arange(0, BLOCK_T)
    mask = t < T
    offsets = b * T * H + t * H + h
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    y = tl.cumsum(x, axis=0) * scale
    if ROUND:
        y = y.to(tl.float16).to(tl.float32)
    tl.store(y_ptr + offsets, y, mask=mask)


def _depth(n=0):
    try:
        return _depth(n + 1)
    except RecursionError:
        return n


_first = []


def kernel(x, scale):
    batch, steps, heads = x.shape
    room = _depth()  # recursion room left: the recursion limit minus the caller's depth
    if not _first:
        _first.append(room)
    y = torch.empty_like(x)
    _cumsum_kernel[(batch * heads,)](x, y, scale, steps, heads, BLOCK_T=triton.next_power_of_2(steps),
                                     ROUND=room != _first[0])
    _seen.add(room)
    if len(_seen) > 1:
        print(f"saw {len(_seen)} stack depths", flush=True)
    return y


_seen = set()
