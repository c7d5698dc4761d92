"""kda_forward on every input FLA's chunk_kda forward accepts (interpreter, fp32 and fp16):
unbounded gates as FLA's own tests and the Kimi model make them, head dims that are not powers
of two, an initial state and the final state, packed sequences (cu_seqlens). Each case is
checked against the float64 recurrence, for o and the final state; nothing may be inf or NaN."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernels.kda import chunk, kda_forward
from kernels.kda.reference import kda_reference

FP32_BAR = 1e-4
FLA_BAR = 5e-3  # FLA's own bar in tests/ops/test_kda.py (fp16/bf16 against the recurrence)


def rel_rms(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


def fla_style_inputs(batch, seq, heads, dim, gates: str, seed: int = 0, dtype=torch.float32):
    """Inputs drawn as FLA's KDA tests draw them: normalized q and k, sigmoid beta, and gates
    ``gates``: "normalizer" (logsigmoid(randn) / 0.1: down to about -48), "kimi"
    (-exp(A_log) softplus(x + dt_bias), A_log = log U(1, 16): down to about -69) or "masked"
    (logsigmoid(randn) with a third of the steps not decaying at all)."""
    gen = torch.Generator().manual_seed(seed)
    size = (batch, seq, heads, dim)
    q = F.normalize(torch.randn(size, generator=gen), dim=-1)
    k = F.normalize(torch.randn(size, generator=gen), dim=-1)
    v = torch.randn(size, generator=gen)
    raw = torch.randn(size, generator=gen)
    if gates == "normalizer":
        g = F.logsigmoid(raw) / 0.1
    elif gates == "kimi":
        a_log = torch.log(torch.empty(heads).uniform_(1, 16, generator=gen))
        dt_bias = torch.randn(heads, dim, generator=gen)
        g = -a_log.exp()[:, None] * F.softplus(raw + dt_bias)
    elif gates == "masked":
        g = F.logsigmoid(raw) * (torch.rand(size, generator=gen) > 1 / 3)
    else:
        raise ValueError(gates)
    beta = torch.sigmoid(torch.randn((batch, seq, heads), generator=gen))
    return {"q": q.to(dtype), "k": k.to(dtype), "v": v.to(dtype), "g": g.float(), "beta": beta.to(dtype),
            "scale": dim ** -0.5}


@pytest.fixture(params=["flat", "split", "subchunk"])
def variant(request, monkeypatch):
    monkeypatch.setitem(chunk.CONFIG, "prep_variant", request.param)
    return request.param


@pytest.mark.parametrize("chunk_size", [32, 64])
@pytest.mark.parametrize("gates", ["normalizer", "kimi", "masked"])
def test_unbounded_gates_are_exact_and_finite(variant, gates, chunk_size, monkeypatch):
    # Every halving level of the exact diagonal blocks (1 to 8 tokens) in both chunk sizes.
    monkeypatch.setitem(chunk.CONFIG, "chunk", chunk_size)
    inputs = fla_style_inputs(1, 70, 2, 32, gates, seed=1)
    if gates != "masked":
        assert float(inputs["g"].min()) < -30  # far outside the bounded problem's -5
    h0 = torch.randn(1, 2, 32, 32, generator=torch.Generator().manual_seed(2)) * 0.1
    out, final = kda_forward(**inputs, initial_state=h0, output_final_state=True)
    ref, ref_final = kda_reference(**inputs, initial_state=h0, output_final_state=True)
    assert torch.isfinite(out).all() and torch.isfinite(final).all()
    assert rel_rms(out, ref) < FP32_BAR and rel_rms(final, ref_final) < FP32_BAR


def test_chunks_past_the_bound_and_within_it_in_one_call(variant):
    # The flat preparation's first pass takes the bounded chunks and flags the others, which its
    # exact pass redoes: here head 0's second and fourth chunks (of 32) and all of head 1's.
    inputs = fla_style_inputs(1, 128, 2, 32, "normalizer", seed=5)
    g = inputs["g"].clamp(min=-5.0)
    g[0, 40:50, 0] = inputs["g"][0, 40:50, 0].clamp(max=-12.0)  # span > 84 inside one sub-chunk
    g[0, 100:110, 0] = -20.0
    g[0, :, 1] = inputs["g"][0, :, 1] * 2
    inputs["g"] = g
    out, final = kda_forward(**inputs, output_final_state=True)
    ref, ref_final = kda_reference(**inputs, output_final_state=True)
    assert torch.isfinite(out).all() and torch.isfinite(final).all()
    assert rel_rms(out, ref) < FP32_BAR and rel_rms(final, ref_final) < FP32_BAR


@pytest.mark.parametrize("dim", [60, 100])
def test_head_dims_that_are_not_powers_of_two(variant, dim):
    inputs = fla_style_inputs(2, 37, 1, dim, "kimi", seed=3)
    out, final = kda_forward(**inputs, output_final_state=True)
    ref, ref_final = kda_reference(**inputs, output_final_state=True)
    assert out.shape == inputs["q"].shape and final.shape == (2, 1, dim, dim)
    assert rel_rms(out, ref) < FP32_BAR and rel_rms(final, ref_final) < FP32_BAR


def test_packed_sequences_with_states(variant):
    # Lengths 1, 0, 33 and 36: a one-token sequence, an empty one, and chunk boundaries that
    # fall inside sequences; each sequence starts from its own state.
    lengths = [1, 0, 33, 36]
    cu = torch.tensor([0, 1, 1, 34, 70], dtype=torch.int32)
    inputs = fla_style_inputs(1, sum(lengths), 2, 32, "normalizer", seed=4)
    h0 = torch.randn(len(lengths), 2, 32, 32, generator=torch.Generator().manual_seed(5)) * 0.1
    out, final = kda_forward(**inputs, initial_state=h0, output_final_state=True, cu_seqlens=cu)
    ref, ref_final = kda_reference(**inputs, initial_state=h0, output_final_state=True, cu_seqlens=cu)
    assert rel_rms(out, ref) < FP32_BAR and rel_rms(final, ref_final) < FP32_BAR
    assert torch.equal(final[1], h0[1])  # an empty sequence hands its state through untouched
    # Packing changes nothing: the last sequence alone gives the same output.
    alone = {n: (x[:, 34:].contiguous() if torch.is_tensor(x) else x) for n, x in inputs.items()}
    out_alone = kda_forward(**alone, initial_state=h0[3:].contiguous())
    assert rel_rms(out[:, 34:], out_alone) < 1e-6


def test_fp16_at_fla_bar():
    inputs = fla_style_inputs(1, 64, 2, 64, "kimi", seed=6, dtype=torch.float16)
    ref = kda_reference(**inputs)
    out = kda_forward(**inputs)
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    assert rel_rms(out, ref) < FLA_BAR


def test_returns_o_alone_unless_the_final_state_is_asked_for():
    inputs = fla_style_inputs(1, 20, 1, 16, "masked", seed=7)
    assert isinstance(kda_forward(**inputs), torch.Tensor)
    out, final = kda_forward(**inputs, output_final_state=True)
    assert final.dtype == torch.float32 and final.shape == (1, 1, 16, 16)


def test_bad_interface_inputs_say_what_is_wrong():
    inputs = fla_style_inputs(2, 10, 1, 16, "masked")
    with pytest.raises(ValueError, match=r"initial_state must be \[N, H, D, D\] = \(2, 1, 16, 16\), got \(1, 1, 16, 16\)"):
        kda_forward(**inputs, initial_state=torch.zeros(1, 1, 16, 16))
    with pytest.raises(ValueError, match="with cu_seqlens the batch must be 1"):
        kda_forward(**inputs, cu_seqlens=torch.tensor([0, 10], dtype=torch.int32))
    packed = fla_style_inputs(1, 10, 1, 16, "masked")
    with pytest.raises(ValueError, match=r"cu_seqlens must start at 0, end at T = 10 and never decrease"):
        kda_forward(**packed, cu_seqlens=torch.tensor([0, 6, 4, 10], dtype=torch.int32))
    with pytest.raises(ValueError, match="1-D int32/int64"):
        kda_forward(**packed, cu_seqlens=torch.tensor([0.0, 10.0]))
    with pytest.raises(ValueError, match=r"head dim D must be in \[1, 256\], got 300"):
        kda_forward(**fla_style_inputs(1, 2, 1, 300, "masked"))


@pytest.mark.parametrize("prep_variant", ["split", "subchunk"])
@pytest.mark.parametrize("gate", [-5.0, -5.2, -5.6, -6.0])
def test_split_preparation_on_both_sides_of_the_safe_span(monkeypatch, gate, prep_variant):
    # Every gate equal: a sub-chunk of 16 spans 16 x |gate| nats from the split variant's anchor,
    # 80 and 83.2 (factored, the factors at e^(+-40) and beyond) and 89.6 and 96 (past
    # SAFE_SPAN = 84: the exact diagonal blocks). The subchunk variant's anchor is the sub-chunk's
    # first token: its last row spans 15 x |gate|, 84.0 (factored, keys up to e^84) and 90 (row
    # 15 exact, the others factored). Chunk 64 puts four sub-chunks, so four anchors, in each
    # chunk (and three steps of the subchunk variant's block solve); fp32 keeps the bar tight.
    monkeypatch.setitem(chunk.CONFIG, "prep_variant", prep_variant)
    monkeypatch.setitem(chunk.CONFIG, "chunk", 64)
    inputs = fla_style_inputs(1, 80, 2, 32, "masked", seed=8)
    inputs["g"] = torch.full_like(inputs["g"], gate)
    inputs["g"][:, 40:44, :, :7] = 0.0  # a few channels that keep their state for a while
    out, final = kda_forward(**inputs, output_final_state=True)
    ref, ref_final = kda_reference(**inputs, output_final_state=True)
    assert torch.isfinite(out).all() and torch.isfinite(final).all()
    assert rel_rms(out, ref) < FP32_BAR and rel_rms(final, ref_final) < FP32_BAR


@pytest.mark.parametrize("prep_variant", ["split", "subchunk"])
def test_split_preparation_is_causal(monkeypatch, prep_variant):
    # The anchors lie at or before each query; changing the last tokens' gates, keys and values
    # leaves every earlier output bit-identical.
    monkeypatch.setitem(chunk.CONFIG, "prep_variant", prep_variant)
    monkeypatch.setitem(chunk.CONFIG, "chunk", 64)
    inputs = fla_style_inputs(1, 64, 1, 32, "kimi", seed=9)
    out = kda_forward(**inputs)
    changed = {n: (x.clone() if torch.is_tensor(x) else x) for n, x in inputs.items()}
    for name in ("k", "v", "g"):
        changed[name][:, 50:] = torch.randn_like(changed[name][:, 50:]) - (3.0 if name == "g" else 0.0)
    out_changed = kda_forward(**changed)
    assert torch.equal(out[:, :50], out_changed[:, :50])
    assert not torch.equal(out[:, 50:], out_changed[:, 50:])


@pytest.mark.parametrize("gates", ["normalizer", "masked"])
def test_subchunk_preparation_at_chunk_16(monkeypatch, gates):
    # One sub-chunk per chunk: no earlier keys inside a chunk, the block solve is the 16 x 16
    # inverse alone; a ragged tail, an initial state and the final state.
    monkeypatch.setitem(chunk.CONFIG, "prep_variant", "subchunk")
    monkeypatch.setitem(chunk.CONFIG, "chunk", 16)
    inputs = fla_style_inputs(1, 41, 2, 32, gates, seed=10)
    h0 = torch.randn(1, 2, 32, 32, generator=torch.Generator().manual_seed(11)) * 0.1
    out, final = kda_forward(**inputs, initial_state=h0, output_final_state=True)
    ref, ref_final = kda_reference(**inputs, initial_state=h0, output_final_state=True)
    assert torch.isfinite(out).all() and torch.isfinite(final).all()
    assert rel_rms(out, ref) < FP32_BAR and rel_rms(final, ref_final) < FP32_BAR


def test_subchunk_preparation_fp16_at_fla_bar(monkeypatch):
    monkeypatch.setitem(chunk.CONFIG, "prep_variant", "subchunk")
    monkeypatch.setitem(chunk.CONFIG, "chunk", 64)
    inputs = fla_style_inputs(1, 64, 2, 64, "kimi", seed=6, dtype=torch.float16)
    out = kda_forward(**inputs)
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    assert rel_rms(out, kda_reference(**inputs)) < FLA_BAR
