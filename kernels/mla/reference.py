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


def paged_reference(q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor,
                    cache_seqlens: torch.Tensor, scale: float) -> torch.Tensor:
    """``reference`` through a paged cache, one request at a time: request b's tokens are slots
    ``t % P`` of pages ``block_table[b, t // P]``, t < ``cache_seqlens[b]``.

    q: [B, H, 576]; kv_cache: [num_pages, P, 576]; block_table: [B, max_pages]; cache_seqlens:
    [B]. Returns float32 [B, H, 512] (zeros for a request of length 0).
    """
    batch, heads, width = q.shape
    if kv_cache.dim() != 3 or kv_cache.shape[2] != width:
        raise ValueError(f"kv_cache must be [num_pages, P, {width}], got {tuple(kv_cache.shape)}")
    if block_table.dim() != 2 or block_table.shape[0] != batch or tuple(cache_seqlens.shape) != (batch,):
        raise ValueError(f"block_table must be [B = {batch}, max_pages] and cache_seqlens [B], got "
                         f"{tuple(block_table.shape)} and {tuple(cache_seqlens.shape)}")
    page_size = kv_cache.shape[1]
    out = torch.zeros(batch, heads, D_LATENT, dtype=torch.float32, device=q.device)
    for b in range(batch):
        length = int(cache_seqlens[b])
        if length == 0:
            continue
        pages = block_table[b, : math.ceil(length / page_size)].long()
        keys = kv_cache[pages].reshape(-1, width)[:length]
        out[b] = reference(q[b:b + 1], keys[None], scale)[0]
    return out
