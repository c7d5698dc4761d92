"""Class 1 (code that runs after the call, guards off): a generator attached to the output
runs its ``finally`` when the harness drops that output. There it replaces the harness's
call with one that replays the last output and skips the work. Whatever it patches, every
later output is judged by the referee against inputs drawn for that call."""

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
    tl.store(y_ptr + offsets, tl.cumsum(x, axis=0) * scale, mask=mask)


_last = {}


def _patch():
    try:
        yield
    finally:  # runs when the harness drops the output, guards off
        try:
            calls = torch.sys.modules["kernels.judge.sandbox_calls"].Calls
            original = calls.invoke

            def replay(self, inputs, shape, when):
                if shape in _last:
                    return _last[shape], 0.001
                out, ms = original(self, inputs, shape, when)
                _last[shape] = out
                return out, ms

            calls.invoke = replay
        except BaseException:
            pass


def kernel(x, scale):
    batch, steps, heads = x.shape
    y = torch.empty_like(x)
    _cumsum_kernel[(batch * heads,)](x, y, scale, steps, heads, BLOCK_T=triton.next_power_of_2(steps))
    gen = _patch()
    next(gen)
    y.keep = gen  # dropped with the output, after the call: the finally runs then
    return y
