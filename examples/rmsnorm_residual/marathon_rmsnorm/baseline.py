"""What a user would otherwise run: the residual add and RMSNorm written in PyTorch."""

from __future__ import annotations

from typing import Any, Callable

import torch

EPS = 1e-6


def rmsnorm_residual_torch(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The usual form (Llama's RMSNorm after the residual add): statistics in fp32, output in x's dtype."""
    h = (x + residual).float()
    y = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + EPS)
    return y.to(x.dtype) * weight


def baselines(device: Any) -> dict[str, Callable[..., torch.Tensor]]:
    """label -> fn(x, residual, weight); the first is the one speedups are reported against.
    On a GPU ``torch.compile`` (inductor fuses the add and the norm) then eager; on the CPU eager
    only (compiling there needs a C++ toolchain and says nothing about GPU speed)."""
    if str(device).startswith("cuda"):
        return {"torch-compile": torch.compile(rmsnorm_residual_torch, dynamic=False), "eager": rmsnorm_residual_torch}
    return {"eager": rmsnorm_residual_torch}
