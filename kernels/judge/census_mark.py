"""The harness's window marker for a census session (``census.py``): a tiny Triton kernel whose
grid carries the code the caller drew for the window. Runs in the candidate's process (the
harness's code there), so it proves nothing by itself: ``census.analyze`` refuses any marker
launch it did not expect, and forging one can only move the candidate's kernels out of a window,
which it also refuses."""

from __future__ import annotations

import triton
import triton.language as tl

_BUFFERS: dict[str, object] = {}


@triton.jit
def marathon_census_mark(flag_ptr):
    tl.store(flag_ptr + tl.program_id(0) * 0, 1)


def mark(torch, code: int, device: str = "cuda") -> None:
    """Launch the marker with grid ``(code,)`` between two device synchronizations, so that
    every kernel launched before it is listed before it and none after it comes earlier."""
    if not 1 <= int(code) < 2**31:
        raise ValueError(f"a window marker's code must be in [1, 2**31), got {code}")
    if device not in _BUFFERS:
        _BUFFERS[device] = torch.zeros(1, dtype=torch.int32, device=device)
    torch.cuda.synchronize()
    marathon_census_mark[(int(code),)](_BUFFERS[device])
    torch.cuda.synchronize()
