"""The gates and probes every KDA problem draws: what a real model's KDA layer feeds its kernel,
mixed inside one tensor, and the off-distribution probes of the held-out family.

**The Kimi gate** (Kimi Linear's ``KimiDeltaAttention``, FLA's ``fused_kda_gate``): per head a
rate ``a = exp(A_log)``, ``A_log = log U(1, 16)`` (the model's initialisation), per head and
channel a bias ``dt_bias``, per token the gate projection ``raw``:

- unbounded (``kda-general``, ``kda-varlen``): ``g = -a * softplus(raw + dt_bias)``;
- bounded (``kda``, FLA's ``lower_bound`` form): ``g = lower_bound * sigmoid(raw + dt_bias)``.

``dt_bias`` is drawn uniform in ``MEMORY_BIAS_RANGE`` = [-12, 1] per head and channel (bounded:
uniform in [-12, 2], the sigmoid's logit), and every
sequence (batch row) adds its own shift, uniform in ±``SEQUENCE_SHIFT``: in one tensor, about a
third of the channels keep their state for hundreds of tokens (per-step decay about e^-0.001)
next to channels that forget within a few tokens (decay down to e^-5 or beyond), and sequences
differ. A kernel that forgets its state after a few dozen tokens is wrong on every draw, not only
in a regime it could recognise.

**The probes** (regime ``"probe"``, the held-out family): per head and channel, a third of the
gates saturated open (g = 0 exactly: no decay at all), a third at the strongest decay the problem
allows (the lower bound, or -50 unbounded), a third Kimi gates; keys that are unit basis vectors
(an exact one-hot per token, so the delta rule overwrites single rows of the state); betas pushed
to the ends (sigmoid(±8)) for half the tokens.
"""

from __future__ import annotations

from typing import Any

KIMI_A_RANGE = (1.0, 16.0)
MEMORY_BIAS_RANGE = (-12.0, 1.0)
BOUNDED_LOGIT_RANGE = (-12.0, 2.0)
SEQUENCE_SHIFT = 1.0
PROBE_STRONG_DECAY = -50.0  # the probes' strongest unbounded decay: e^-50, past any chunk's fp32 range


def kimi_gate(raw: Any, gen: Any, lower_bound: float | None) -> Any:
    """The Kimi gate of ``raw`` [B, T, H, D] (standard normal gate projections), fp32 on raw's
    device: unbounded when ``lower_bound`` is None, else in [lower_bound, 0]. Draws the per-head
    rates, per-channel biases and per-sequence shifts from ``gen`` (module docstring)."""
    import torch
    import torch.nn.functional as F

    batch, _, heads, dim = raw.shape
    where = raw.device
    low, high = KIMI_A_RANGE
    rate = low + (high - low) * torch.rand(heads, generator=gen, device=where)
    b_low, b_high = MEMORY_BIAS_RANGE
    bias = b_low + (b_high - b_low) * torch.rand(heads, dim, generator=gen, device=where)
    shift = SEQUENCE_SHIFT * (2.0 * torch.rand(batch, 1, 1, 1, generator=gen, device=where) - 1.0)
    if lower_bound is None:
        return -rate[:, None] * F.softplus(raw + bias + shift)
    # The sigmoid saturates where the softplus does not: there the bias is the gate's mean
    # logit, uniform over BOUNDED_LOGIT_RANGE, with per-token noise of one: about a third of the
    # channels below -7.3 (decay above e^-0.0035 per step) and a third above -2.2 (below e^-0.5).
    l_low, l_high = BOUNDED_LOGIT_RANGE
    logit_bias = l_low + (l_high - l_low) * (bias - b_low) / (b_high - b_low)
    return lower_bound * torch.sigmoid(raw + logit_bias + shift)


def probe_gates(g: Any, gen: Any, lower_bound: float | None) -> Any:
    """``g`` with a third of its (head, channel) columns saturated open (0) and a third at the
    strongest decay (``lower_bound``, or ``PROBE_STRONG_DECAY`` when unbounded)."""
    import torch

    heads, dim = g.shape[2], g.shape[3]
    kind = torch.randint(0, 3, (heads, dim), generator=gen, device=g.device)
    strongest = PROBE_STRONG_DECAY if lower_bound is None else lower_bound
    g = torch.where(kind == 0, torch.zeros_like(g), g)
    return torch.where(kind == 1, torch.full_like(g, strongest), g)


def unit_keys(k: Any, gen: Any) -> Any:
    """One-hot keys of ``k``'s shape: each token's key a random unit basis vector."""
    import torch

    index = torch.randint(0, k.shape[-1], k.shape[:-1], generator=gen, device=k.device)
    return torch.nn.functional.one_hot(index, k.shape[-1]).to(k.dtype)


def saturated_beta(beta: Any, gen: Any) -> Any:
    """``beta`` with half its tokens pushed to sigmoid(±8) (the write nearly skipped or total)."""
    import torch

    pick = torch.rand(beta.shape, generator=gen, device=beta.device) < 0.5
    ends = torch.sigmoid(8.0 * torch.sign(torch.randn(beta.shape, generator=gen, device=beta.device)))
    return torch.where(pick, ends, beta)
