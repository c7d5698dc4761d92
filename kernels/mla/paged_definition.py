"""MLA decode from a paged KV cache: the problem as data (a variant for the loop).

The computation of ``mla-decode`` (``definition.py``: one query token per request, H heads, a
576-wide latent that is both key and value), with the cache held as serving engines hold it:

    q [B, H, 576], kv_cache [num_pages, P, 576], block_table [B, max_pages] int32,
    cache_seqlens [B] int32, scale  ->  o [B, H, 512]

Token t of request b lives at slot ``t % P`` of page ``block_table[b, t // P]``. Shapes are
``(B, H, S, P)``: S the longest request, P the page size (64 as FlashMLA uses, 1 as SGLang's
Triton path uses).

What the inputs hold, for every seed:

- **Ragged lengths, fixed by the shape**: request b holds ``S - b·(S // 2) // (B - 1)`` tokens
  (the first S, the last about S/2), so the bytes a kernel must read, and the roofline, follow
  from the shape alone.
- **Pages shuffled**: every page id comes from a random permutation of the cache's pages, so a
  request's pages are neither contiguous nor in order; the cache has a few pages more than the
  requests use.
- **Stale tokens outside the requests**: slots past a request's length, unused pages and the
  pages block-table entries past a request's pages name hold tokens drawn like the requests'
  own (unit scale, the same per-token gains): what a real cache holds after earlier requests
  were freed. Only ``cache_seqlens`` tells them apart, so a kernel that ignores it, or masks by
  magnitude, is wrong; one that masks its scores by length is not.

The values of q, the tokens and ``scale`` are those of ``mla-decode`` at ``(B, H, S)`` for the same
seed and regime (``default``, ``peaked``, ``flat``). The baseline is the same computation in
PyTorch after gathering the pages (``paged_baseline.py``), under torch.compile on a GPU.
"""

from __future__ import annotations

import random
from typing import Any

from kernels.mla.definition import (
    D_LATENT,
    D_QK,
    HELD_OUT,
    REGIMES,
    SOFTMAX_SCALE,
    TOKEN_GAIN_LOG_STD,
    make_inputs as dense_inputs,
)
from kernels.problem import (ELEMENT_BYTES, Problem, Shape, check_regime, dtype_name, input_generator, standard_parts,
                             vary_length)



def _check_shape(shape: Shape) -> tuple[int, int, int, int]:
    if len(shape) != 4 or any(int(n) < 1 for n in shape):
        raise ValueError(f"an mla-decode-paged shape is (B, H, S, P) with positive sizes, got {shape!r}")
    batch, heads, seq, page = (int(n) for n in shape)
    return batch, heads, seq, page


def lengths(batch: int, seq: int) -> list[int]:
    """Tokens per request at shape (B, ·, S, ·): S for the first, down to S - S // 2 for the last."""
    if batch == 1:
        return [seq]
    return [seq - (b * (seq // 2)) // (batch - 1) for b in range(batch)]


def make_inputs(
    shape: Shape, seed: int, device: Any = "cpu", dtype: Any = "bfloat16", regime: str = "default"
) -> dict[str, Any]:
    """Inputs for shape ``(B, H, S, P)`` (module docstring): ``q`` [B, H, 576], ``kv_cache``
    [num_pages, P, 576], ``block_table`` [B, ceil(S / P)] int32, ``cache_seqlens`` [B] int32,
    ``scale``. Drawn on ``device`` from generators seeded from ``(seed, regime)``."""
    import torch

    check_regime(regime, REGIMES + HELD_OUT)
    batch, heads, seq, page = _check_shape(shape)
    dense = dense_inputs((batch, heads, seq), seed, device, dtype, regime)
    kv = dense["kv"]
    gen, where = input_generator(seed, f"{regime}:pages", device)
    pages_per = -(-seq // page)
    used = batch * pages_per
    num_pages = used + pages_per // 4 + 1
    order = torch.randperm(num_pages, generator=gen, device=where)
    table = order[:used].reshape(batch, pages_per)
    # Stale tokens everywhere first, drawn as the requests' tokens are: unit scale, per-token gains.
    gain = torch.exp(TOKEN_GAIN_LOG_STD * torch.randn(num_pages, page, 1, generator=gen, device=where))
    cache = (torch.randn(num_pages, page, D_QK, generator=gen, device=where) * gain).to(kv.dtype)
    seqlens = lengths(batch, seq)
    for b, length in enumerate(seqlens):
        # Token t to slot t % P of page table[b, t // P]; every other slot keeps its stale token,
        # and the table's entries past the request's pages name pages of stale tokens.
        tokens = torch.arange(length, device=where)
        cache[table[b, tokens // page], tokens % page] = kv[b, :length]
    return {
        "q": dense["q"],
        "kv_cache": cache.contiguous(),
        "block_table": table.to(torch.int32).contiguous(),
        "cache_seqlens": torch.tensor(seqlens, dtype=torch.int32, device=where),
        "scale": dense["scale"],
    }


def vary_shape(shape: Shape, rng: random.Random, spread: float = 0.25) -> Shape:
    """A member of ``shape``'s family: B, H and P kept, S uniform within +-``spread`` (at least 1)."""
    batch, heads, seq, page = _check_shape(shape)
    return (batch, heads, vary_length(seq, rng, spread), page)


def output(shape: Shape, dtype: str) -> tuple[Shape, str]:
    batch, heads, _, _ = _check_shape(shape)
    return (batch, heads, D_LATENT), dtype_name(dtype)


def flops(shape: Shape, dtype: str = "bfloat16") -> float:
    """2·H·(576 + 512) per cached token of every request."""
    batch, heads, seq, _ = _check_shape(shape)
    return 2.0 * heads * sum(lengths(batch, seq)) * (D_QK + D_LATENT)


def bytes_moved(shape: Shape, dtype: str = "bfloat16") -> float:
    """Every request's tokens, q and o once (the block table and partials not counted)."""
    batch, heads, seq, _ = _check_shape(shape)
    element = ELEMENT_BYTES[dtype_name(dtype)]
    return float(element * (sum(lengths(batch, seq)) * D_QK + batch * heads * (D_QK + D_LATENT)))


BENCH_SHAPES: tuple[Shape, ...] = (
    (1, 64, 8192, 64),
    (32, 64, 8192, 64),
    (64, 128, 4096, 64),
    (1, 64, 65536, 64),
    (32, 64, 8192, 1),
)

PROBLEM = Problem(
    name="mla-decode-paged",
    title="DeepSeek MLA decode from a paged KV cache: ragged requests, shuffled pages of 64 or 1 tokens",
    input_names=("q", "kv_cache", "block_table", "cache_seqlens", "scale"),
    dims=("B", "H", "S", "P"),
    shapes={
        "bench": BENCH_SHAPES,
        "verify": ((1, 64, 1000, 64), (3, 16, 777, 64), (2, 128, 4097, 1), (1, 64, 1, 64), (4, 8, 300, 1),
                   (2, 64, 8192, 64)),
        "cpu": ((1, 4, 63, 16), (3, 3, 130, 1), (2, 16, 100, 64)),
    },
    # As mla-decode (definition.py): the PyTorch baseline's bf16 scores cost about 1e-2.
    tolerance={"bfloat16": 2e-2, "float16": 1e-2, "float32": 1e-4},
    reference="kernels.mla.reference:paged_reference",
    baselines="kernels.mla.paged_baseline:baselines",
    ours="kernels.mla.paged:mla_decode_paged",
    space="kernels.mla.paged_space",
    causal=None,
    notes="Memory-bound like mla-decode; each row is gathered through the block table. Batch-1 shapes "
    "are also timed under CUDA-graph replay.",
    extra={"softmax_scale": SOFTMAX_SCALE, "launch_bound_shapes": [(1, 64, 8192, 64)]},
    **standard_parts(globals()),
)
