"""mla_decode_paged (interpreter, fp32): a paged KV cache as serving engines hold it — page
sizes 64 (FlashMLA) and 1 (SGLang's Triton path) and one between, every request its own
length (1, not a multiple of any block, longer than one split), pages shuffled and not
contiguous; against the float64 reference through the pages, and equal to the dense kernel
when the pages hold the dense cache in order."""

from __future__ import annotations

import pytest
import torch

from kernels.mla import mla_decode, mla_decode_paged
from kernels.mla.decode import CONFIG, split_plan
from kernels.mla.reference import paged_reference

SCALE = 192 ** -0.5
TOLERANCE = 1e-4


def rel_rms(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


def paged_inputs(lengths, page_size, heads=4, seed=0, spare_pages=3):
    gen = torch.Generator().manual_seed(seed)
    batch = len(lengths)
    max_pages = max(1, -(-max(lengths) // page_size))
    num_pages = batch * max_pages + spare_pages
    kv_cache = torch.randn(num_pages, page_size, 576, generator=gen)
    # Every request's pages: distinct, shuffled over the whole cache, not in order.
    block_table = torch.randperm(num_pages, generator=gen)[: batch * max_pages].reshape(batch, max_pages)
    q = torch.randn(batch, heads, 576, generator=gen) * 0.05
    return q, kv_cache, block_table.to(torch.int32).contiguous(), torch.tensor(lengths, dtype=torch.int32)


# Page sizes that hold whole tiles (64, 128: one lookup per tile, at offsets 0 and 64 of a page)
# and those that do not (1, 16: a lookup per row).
@pytest.mark.parametrize("page_size,lengths", [(64, [1, 100, 300]), (128, [1, 100, 300]), (1, [5, 1, 77]),
                                               (16, [33, 64, 129])],
                         ids=["page64", "page128", "page1", "page16"])
def test_paged_matches_the_reference_through_the_pages(page_size, lengths):
    q, kv_cache, block_table, seqlens = paged_inputs(lengths, page_size)
    out = mla_decode_paged(q, kv_cache, block_table, seqlens, SCALE)
    assert out.shape == (len(lengths), 4, 512) and torch.isfinite(out).all()
    assert rel_rms(out, paged_reference(q, kv_cache, block_table, seqlens, SCALE)) < TOLERANCE


# One split (the split kernel writes the output itself) and several (the combine merges them).
@pytest.mark.parametrize("page_size,lengths,splits", [(16, [0, 40], 1), (64, [0, 300, 40], 5)],
                         ids=["one-split", "five-splits"])
def test_an_empty_request_gets_zeros_and_leaves_the_others_alone(page_size, lengths, splits):
    q, kv_cache, block_table, seqlens = paged_inputs(lengths, page_size)
    assert split_plan(len(lengths), 4, block_table.shape[1] * page_size)["num_splits"] == splits
    out = mla_decode_paged(q, kv_cache, block_table, seqlens, SCALE)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    ref = paged_reference(q, kv_cache, block_table, seqlens, SCALE)
    assert rel_rms(out[1:], ref[1:]) < TOLERANCE


def test_paged_with_the_small_batch_knobs(monkeypatch):
    # The paged kernel shares the dense kernel's plan: small batches take 16-head blocks and
    # 32-token tiles (two tiles per 64-token page) with splits of at least 128 tokens.
    for key, value in {"small_batch_heads": 64, "small_block_h": 16, "small_block_n": 32, "small_num_warps": 4,
                       "small_num_stages": 3, "small_min_split_tokens": 128}.items():
        monkeypatch.setitem(CONFIG, key, value)
    split_plan.cache_clear()
    try:
        q, kv_cache, block_table, seqlens = paged_inputs([1, 300, 200], 64, heads=5)
        assert split_plan(3, 5, block_table.shape[1] * 64)["block_n"] == 32
        out = mla_decode_paged(q, kv_cache, block_table, seqlens, SCALE)
        assert rel_rms(out, paged_reference(q, kv_cache, block_table, seqlens, SCALE)) < TOLERANCE
    finally:
        split_plan.cache_clear()


def test_pages_in_order_give_the_dense_result():
    gen = torch.Generator().manual_seed(3)
    batch, heads, seq, page_size = 2, 3, 96, 32
    kv = torch.randn(batch, seq, 576, generator=gen)
    q = torch.randn(batch, heads, 576, generator=gen) * 0.05
    kv_cache = kv.reshape(batch * seq // page_size, page_size, 576).contiguous()
    block_table = torch.arange(batch * seq // page_size, dtype=torch.int32).reshape(batch, -1).contiguous()
    seqlens = torch.full((batch,), seq, dtype=torch.int32)
    paged = mla_decode_paged(q, kv_cache, block_table, seqlens, SCALE)
    assert rel_rms(paged, mla_decode(q, kv, SCALE)) < 1e-6


def test_bad_inputs_say_what_is_wrong():
    q, kv_cache, block_table, seqlens = paged_inputs([4, 8], 4)
    with pytest.raises(ValueError, match=r"kv_cache must be \[num_pages, page_size, 576\]"):
        mla_decode_paged(q, kv_cache[..., :512].contiguous(), block_table, seqlens, SCALE)
    with pytest.raises(ValueError, match=r"block_table must be int32 \[B = 2, max_pages >= 1\]"):
        mla_decode_paged(q, kv_cache, block_table.float(), seqlens, SCALE)
    with pytest.raises(ValueError, match=r"cache_seqlens must be int32 \[B = 2\]"):
        mla_decode_paged(q, kv_cache, block_table, seqlens[:1].contiguous(), SCALE)
    with pytest.raises(ValueError, match="scale must be a positive finite number"):
        mla_decode_paged(q, kv_cache, block_table, seqlens, -1.0)


# The value-split streaming kernel through the pages: tiles within a page (64, 32-token tiles),
# across pages (page 16), per-row lookups (page 1); lengths below the cache length, one empty.
@pytest.mark.parametrize("page_size,lengths", [(64, [0, 100, 300]), (16, [33, 1, 129]), (1, [5, 77])],
                         ids=["page64", "page16", "page1"])
def test_value_split_kernel_through_the_pages(monkeypatch, page_size, lengths):
    for key, value in {"value_split": 2, "block_n": 32, "block_h": 16, "num_warps": 4,
                       "min_split_tokens": 64}.items():
        monkeypatch.setitem(CONFIG, key, value)
    split_plan.cache_clear()
    try:
        q, kv_cache, block_table, seqlens = paged_inputs(lengths, page_size, heads=5, spare_pages=2)
        assert split_plan(len(lengths), 5, block_table.shape[1] * page_size)["value_split"] == 2
        out = mla_decode_paged(q, kv_cache, block_table, seqlens, SCALE)
        ref = paged_reference(q, kv_cache, block_table, seqlens, SCALE)
        filled = seqlens > 0
        assert torch.equal(out[~filled], torch.zeros_like(out[~filled]))
        assert rel_rms(out[filled], ref[filled]) < TOLERANCE
    finally:
        split_plan.cache_clear()
