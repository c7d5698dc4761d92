"""High-precision references for MLA decode (absorbed form)."""

from __future__ import annotations

import math

import torch

D_LATENT = 512


def _check(q: torch.Tensor, kv: torch.Tensor) -> None:
    if q.dim() != 3 or kv.dim() != 3:
        raise ValueError(f"q must be [B, H, 576] and kv [B, S, 576]; got {tuple(q.shape)} and {tuple(kv.shape)}")
    if q.shape[0] != kv.shape[0] or q.shape[2] != kv.shape[2] or q.shape[2] <= D_LATENT:
        raise ValueError(f"q {tuple(q.shape)} and kv {tuple(kv.shape)} disagree on batch or width (> {D_LATENT})")


def reference(q: torch.Tensor, kv: torch.Tensor, scale: float) -> torch.Tensor:
    """softmax(scale · q·kvᵀ) · kv[..., :512] in float64; returns float32 [B, H, 512].

    q: [B, H, 576], kv: [B, S, 576], scale: float.
    """
    _check(q, kv)
    q64, kv64 = q.double(), kv.double()
    scores = torch.einsum("bhd,bsd->bhs", q64, kv64) * scale
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("bhs,bsc->bhc", probs, kv64[..., :D_LATENT]).float()


def reference_naive(q: torch.Tensor, kv: torch.Tensor, scale: float) -> torch.Tensor:
    """The same function written differently, for tests: one (batch, head) at a time, a
    explicit running maximum, exponentials and sums, and the value read as a separate copy.

    Slow; use at small shapes only. Returns float32 [B, H, 512].
    """
    _check(q, kv)
    batch, heads, _ = q.shape
    out = torch.empty(batch, heads, D_LATENT, dtype=torch.float64)
    for b in range(batch):
        keys = kv[b].double().cpu()
        values = keys[:, :D_LATENT].clone()
        for h in range(heads):
            query = q[b, h].double().cpu()
            logits = [scale * float(torch.dot(query, key)) for key in keys]
            peak = max(logits)
            weights = torch.tensor([math.exp(x - peak) for x in logits], dtype=torch.float64)
            out[b, h] = (weights[:, None] * values).sum(dim=0) / weights.sum()
    return out.float().to(q.device)
