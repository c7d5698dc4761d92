"""What a user would otherwise run for a paged cache: gather the pages, then the dense PyTorch
form (``baseline.py``) with the tokens past each request's length masked out."""

from __future__ import annotations

from typing import Any, Callable

import torch

D_LATENT = 512


def mla_decode_paged_torch(q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor,
                           cache_seqlens: torch.Tensor, scale: float) -> torch.Tensor:
    """q [B, H, 576], kv_cache [num_pages, P, 576], block_table [B, max_pages], cache_seqlens [B]
    -> o [B, H, 512] in q's dtype (zeros for a request of length 0)."""
    batch = q.shape[0]
    kv = kv_cache[block_table.long()].reshape(batch, -1, kv_cache.shape[-1])  # [B, max_pages * P, 576]
    scores = torch.einsum("bhd,bsd->bhs", q, kv).float() * scale
    valid = torch.arange(kv.shape[1], device=q.device)[None, :] < cache_seqlens[:, None]
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    probs = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0).to(q.dtype)
    return torch.einsum("bhs,bsc->bhc", probs, kv[..., :D_LATENT])


def baselines(device: Any) -> dict[str, Callable[..., torch.Tensor]]:
    """label -> fn(q, kv_cache, block_table, cache_seqlens, scale); the first is the primary.
    On a GPU ``torch-compile`` (static shapes) then ``eager``; on the CPU ``eager`` only."""
    if str(device).startswith("cuda"):
        return {"torch-compile": torch.compile(mla_decode_paged_torch, dynamic=False),
                "eager": mla_decode_paged_torch}
    return {"eager": mla_decode_paged_torch}
