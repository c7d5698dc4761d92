"""What a user would otherwise run: the reference written in PyTorch at the input dtype.

Scores come from a bf16 matrix product (fp32 accumulate, bf16 result), the softmax runs in
fp32, the probabilities go back to the input dtype for the value product: the form of
DeepSeek-V3's ``attn_impl == "absorb"`` decode path.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

D_LATENT = 512


def mla_decode_torch(q: torch.Tensor, kv: torch.Tensor, scale: float) -> torch.Tensor:
    """q [B, H, 576], kv [B, S, 576] -> o [B, H, 512] in q's dtype."""
    scores = torch.einsum("bhd,bsd->bhs", q, kv).float() * scale
    probs = torch.softmax(scores, dim=-1).to(q.dtype)
    return torch.einsum("bhs,bsc->bhc", probs, kv[..., :D_LATENT])


def baselines(device: Any) -> dict[str, Callable[..., torch.Tensor]]:
    """label -> fn(q, kv, scale). The first entry is the primary baseline.

    On a GPU: ``torch-compile`` (inductor, static shapes) then ``eager``. On the CPU only
    ``eager``: compiling there needs a C++ toolchain and says nothing about GPU speed.
    """
    if str(device).startswith("cuda"):
        compiled = torch.compile(mla_decode_torch, dynamic=False)
        return {"torch-compile": compiled, "eager": mla_decode_torch}
    return {"eager": mla_decode_torch}
