"""Exploit 5 at run time: reach threading through torch.cuda (which imports it) and defer the launch.

No import statement for the guarded ``__import__`` to see. Python 3.12+ raises the audit
event ``_thread.start_new_thread`` (gh-99377), which the audit hook refuses; Python 3.11 raises
none, so there the thread-count check around each checked call is what stops it.
"""

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


def _later(x, y, scale, steps, heads):
    torch.cuda.threading.Event().wait(30)  # deferred: the timer has long stopped when the work lands
    _cumsum_kernel[(x.shape[0] * heads,)](x, y, scale, steps, heads, BLOCK_T=triton.next_power_of_2(steps))


def kernel(x, scale):
    batch, steps, heads = x.shape
    y = torch.empty_like(x)
    torch.cuda.threading.Thread(target=_later, args=(x, y, scale, steps, heads), daemon=True).start()
    return y
