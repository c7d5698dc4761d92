"""Honest candidate in ordinary Python: typing.NamedTuple for the shape, enum.Enum for the
schedule, functools.lru_cache and functools.partial on the host. The work is a Triton cumsum."""

import enum
import functools
from typing import NamedTuple

import torch
import triton
import triton.language as tl


class Dims(NamedTuple):
    batch: int
    steps: int
    heads: int


class Schedule(enum.Enum):
    SMALL = 1
    LARGE = 4


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


@functools.lru_cache(maxsize=None)
def block_for(steps: int) -> int:
    return triton.next_power_of_2(steps)


def schedule_for(steps: int) -> Schedule:
    return Schedule.SMALL if steps <= 256 else Schedule.LARGE


def _launch(x, y, scale, dims, num_warps):
    _cumsum_kernel[(dims.batch * dims.heads,)](x, y, scale, dims.steps, dims.heads,
                                               BLOCK_T=block_for(dims.steps), num_warps=num_warps)


def kernel(x, scale):
    dims = Dims(*x.shape)
    launch = functools.partial(_launch, num_warps=schedule_for(dims.steps).value)
    y = torch.empty_like(x)
    launch(x, y, scale, dims)
    return y
