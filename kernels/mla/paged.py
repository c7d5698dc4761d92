"""MLA decode from a paged KV cache, as serving engines hold it.

``mla_decode_paged(q, kv_cache, block_table, cache_seqlens, scale)``: request b attends over
its first ``cache_seqlens[b]`` tokens, token t of it living in page ``block_table[b, t // P]``
at slot ``t % P`` of ``kv_cache [num_pages, P, 576]`` (P the page size: 64 as FlashMLA uses,
1 as SGLang's Triton path uses). A request's pages need not be contiguous or in order.

The same split-KV design as the dense kernel (``decode.py``): program (split, b, head block)
reads its slice of the request's tokens in tiles of BLOCK_N rows, each row gathered through
the block table (one page lookup per row; a row's 576 values stay contiguous; where pages hold
whole tiles, one lookup per tile and contiguous rows), attends with
an online softmax and writes a partial; the dense kernel's combine merges the partials. The
host cannot see the lengths without a synchronisation, so the splits are planned for the
longest possible request (``max_pages x P`` tokens); a split past a request's end writes an
empty partial (lse = -inf), which the combine weighs zero.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels.mla.decode import (
    D_LATENT,
    D_QK,
    D_ROPE,
    LOG2_E,
    _launch_dependents,
    _partial_dtype,
    _softmax_step,
    launch_combine,
    launch_stream,
    programmatic_combine,
    split_plan,
    warp_specialized,
    writes_output_directly,
)

_SUPPORTED_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _paged_tile(table, KV_CACHE, n0, end, q_lat, q_rope, m_i, l_i, acc, qk_scale_log2,
                PAGE_SIZE: tl.constexpr, D_LATENT: tl.constexpr, D_ROPE: tl.constexpr, BLOCK_N: tl.constexpr,
                INPUT_PRECISION: tl.constexpr):
    """Tokens [n0, n0 + BLOCK_N) of one request (those below ``end``), gathered through its page
    table ``table``, into the online softmax."""
    D_QK: tl.constexpr = D_LATENT + D_ROPE
    offs_n = n0 + tl.arange(0, BLOCK_N)
    mask_n = offs_n < end
    if PAGE_SIZE % BLOCK_N == 0:
        # The tile lies in one page (tiles start at multiples of BLOCK_N): one scalar lookup
        # and contiguous rows, instead of BLOCK_N lookups and a gathered address per row.
        page = tl.load(table + n0 // PAGE_SIZE).to(tl.int64)
        kv_rows = KV_CACHE + (page * PAGE_SIZE + n0 % PAGE_SIZE + tl.arange(0, BLOCK_N))[:, None] * D_QK
    else:
        page = tl.load(table + offs_n // PAGE_SIZE, mask=mask_n, other=0).to(tl.int64)
        kv_rows = KV_CACHE + (page * PAGE_SIZE + offs_n % PAGE_SIZE)[:, None] * D_QK
    lat = tl.load(kv_rows + tl.arange(0, D_LATENT)[None, :], mask=mask_n[:, None], other=0.0)  # K and V
    rope = tl.load(kv_rows + D_LATENT + tl.arange(0, D_ROPE)[None, :], mask=mask_n[:, None], other=0.0)
    return _softmax_step(q_lat, q_rope, lat, rope, mask_n, m_i, l_i, acc, qk_scale_log2, INPUT_PRECISION)


@triton.jit
def _paged_split_kernel(
    Q, KV_CACHE, BLOCK_TABLE, CACHE_SEQLENS, O_PART, LSE_PART,
    qk_scale_log2, max_pages, num_heads, split_len, num_splits,
    PAGE_SIZE: tl.constexpr, D_LATENT: tl.constexpr, D_ROPE: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr, LAUNCH_DEPENDENTS: tl.constexpr,
):
    """One split of one head block of request b: tokens [split·split_len, +split_len) of it."""
    if LAUNCH_DEPENDENTS:
        _launch_dependents()
    D_QK: tl.constexpr = D_LATENT + D_ROPE
    split = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    head_block = tl.program_id(2)
    offs_h = head_block * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < num_heads
    offs_c = tl.arange(0, D_LATENT)
    offs_r = tl.arange(0, D_ROPE)
    rows_bh = b * num_heads + offs_h

    q_rows = Q + rows_bh[:, None] * D_QK
    q_lat = tl.load(q_rows + offs_c[None, :], mask=mask_h[:, None], other=0.0)
    q_rope = tl.load(q_rows + D_LATENT + offs_r[None, :], mask=mask_h[:, None], other=0.0)

    seq_len = tl.load(CACHE_SEQLENS + b).to(tl.int32)
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, D_LATENT], tl.float32)
    table = BLOCK_TABLE + b * max_pages
    if WARP_SPECIALIZE:
        for n0 in tl.range(start, end, BLOCK_N, warp_specialize=True):
            m_i, l_i, acc = _paged_tile(table, KV_CACHE, n0, end, q_lat, q_rope, m_i, l_i, acc, qk_scale_log2,
                                        PAGE_SIZE, D_LATENT, D_ROPE, BLOCK_N, INPUT_PRECISION)
    else:
        for n0 in range(start, end, BLOCK_N):
            m_i, l_i, acc = _paged_tile(table, KV_CACHE, n0, end, q_lat, q_rope, m_i, l_i, acc, qk_scale_log2,
                                        PAGE_SIZE, D_LATENT, D_ROPE, BLOCK_N, INPUT_PRECISION)

    filled = l_i > 0  # false for a split past the request's end
    o = tl.where(filled[:, None], acc / tl.where(filled, l_i, 1.0)[:, None], 0.0)
    part_index = rows_bh * num_splits + split
    tl.store(O_PART + part_index[:, None] * D_LATENT + offs_c[None, :], o.to(O_PART.dtype.element_ty),
             mask=mask_h[:, None])
    lse = tl.where(filled, m_i + tl.log2(tl.where(filled, l_i, 1.0)), float("-inf"))
    tl.store(LSE_PART + part_index, lse, mask=mask_h)


def _check_paged_inputs(q, kv_cache, block_table, cache_seqlens, scale) -> None:
    for name, x in (("q", q), ("kv_cache", kv_cache), ("block_table", block_table), ("cache_seqlens", cache_seqlens)):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{name} must be a tensor, got {x!r:.80}")
        if x.device != q.device:
            raise ValueError(f"{name} is on {x.device}, q on {q.device}")
        if not x.is_contiguous():
            raise ValueError(f"{name} must be contiguous, got strides {x.stride()}")
    if q.dim() != 3 or q.shape[2] != D_QK or q.shape[0] < 1 or q.shape[1] < 1:
        raise ValueError(f"q must be [B, H, {D_QK}] with B, H >= 1, got {tuple(q.shape)}")
    if kv_cache.dim() != 3 or kv_cache.shape[2] != D_QK or kv_cache.shape[0] < 1 or kv_cache.shape[1] < 1:
        raise ValueError(f"kv_cache must be [num_pages, page_size, {D_QK}], got {tuple(kv_cache.shape)}")
    batch = q.shape[0]
    if block_table.dim() != 2 or block_table.shape[0] != batch or block_table.shape[1] < 1 or \
            block_table.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"block_table must be int32 [B = {batch}, max_pages >= 1], got {tuple(block_table.shape)} "
                         f"{block_table.dtype}")
    if tuple(cache_seqlens.shape) != (batch,) or cache_seqlens.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"cache_seqlens must be int32 [B = {batch}], got {tuple(cache_seqlens.shape)} "
                         f"{cache_seqlens.dtype}")
    if q.dtype != kv_cache.dtype or q.dtype not in _SUPPORTED_DTYPES:
        raise ValueError(f"q and kv_cache must share a dtype among {_SUPPORTED_DTYPES}, got {q.dtype} and "
                         f"{kv_cache.dtype}")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")


def mla_decode_paged(q, kv_cache, block_table, cache_seqlens, scale):
    """o = softmax(scale · q·Kᵀ) · K[..., :512] per request, K its tokens in the paged cache.

    q: [B, H, 576]; kv_cache: [num_pages, page_size, 576] (q's dtype: bf16, fp16 or fp32);
    block_table: [B, max_pages] int32 (page ids; entries past a request's pages are not read);
    cache_seqlens: [B] int32, each in [0, max_pages · page_size] (a request of length 0 gets
    zeros; the lengths are not read on the host, so values out of range are not checked);
    scale: float. Returns o: [B, H, 512] in q's dtype.
    """
    _check_paged_inputs(q, kv_cache, block_table, cache_seqlens, scale)
    batch, heads, _ = q.shape
    page_size, max_pages = kv_cache.shape[1], block_table.shape[1]
    plan = split_plan(batch, heads, max_pages * page_size)
    num_splits = plan["num_splits"]
    out = torch.empty((batch, heads, D_LATENT), dtype=q.dtype, device=q.device)
    # One split: its partial (zeros for a request of length 0) is the output.
    direct = writes_output_directly(plan, None)
    o_part = out if direct else torch.empty((batch, heads, num_splits, D_LATENT), dtype=_partial_dtype(q.dtype),
                                            device=q.device)
    lse_part = torch.empty((batch, heads, num_splits), dtype=torch.float32, device=q.device)
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    pdl = programmatic_combine(plan, q.device) and not direct
    if plan["value_split"] > 1:
        launch_stream(q, kv_cache, block_table, cache_seqlens, o_part, lse_part, scale, plan, page_size, pdl)
        if not direct:
            launch_combine(o_part, lse_part, out, pdl)
        return out
    _paged_split_kernel[(num_splits, batch, plan["head_blocks"])](
        q, kv_cache, block_table, cache_seqlens, o_part, lse_part,
        float(scale) * LOG2_E, max_pages, heads, plan["split_len"], num_splits,
        PAGE_SIZE=page_size, D_LATENT=D_LATENT, D_ROPE=D_ROPE, BLOCK_H=plan["block_h"],
        BLOCK_N=plan["block_n"], INPUT_PRECISION=precision, WARP_SPECIALIZE=warp_specialized(plan, q.device),
        LAUNCH_DEPENDENTS=pdl, num_warps=plan["num_warps"], num_stages=plan["num_stages"],
    )
    if not direct:
        launch_combine(o_part, lse_part, out, pdl)
    return out
