"""MLA decode: reference, input factory, our Triton kernels (interpreter, float32), checks."""

import math
import re
import subprocess
import sys

import pytest
import torch

from kernels.mla.baseline import baselines
from kernels.mla.decode import (
    CONFIG,
    fused_fits,
    mla_decode,
    mla_decode_into,
    programmatic_combine,
    split_plan,
    warp_specialized,
)
from kernels.mla.definition import PROBLEM, bytes_moved, flops, make_inputs
from kernels.mla.reference import reference, reference_naive
from kernels.registry import get_problem

CPU_SHAPES = PROBLEM.shapes["cpu"]
ODD_SHAPES = ((1, 5, 1), (1, 8, 65), (2, 17, 127))
TOL32 = PROBLEM.tolerance["float32"]


def shape_id(shape):
    return "B{}-H{}-S{}".format(*shape)


def rel_rms(out, ref):
    return float((out.double() - ref.double()).norm() / ref.double().norm())


def test_registry_finds_the_problem():
    assert get_problem("mla-decode") is PROBLEM
    assert PROBLEM.input_names == ("q", "kv", "scale")
    assert PROBLEM.causal is None


@pytest.mark.parametrize("shape", CPU_SHAPES + ((1, 3, 1),), ids=shape_id)
def test_reference_agrees_with_naive_formulation(shape):
    inputs = make_inputs(shape, seed=3, dtype="float32")
    assert rel_rms(reference(**inputs), reference_naive(**inputs)) < 1e-6


def test_single_token_attends_to_itself_whatever_the_query():
    inputs = make_inputs((2, 4, 1), seed=5, dtype="float32")
    out = reference(**inputs)
    expected = inputs["kv"][:, :1, :512].expand(2, 4, 512)
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)


def test_make_inputs_is_deterministic_per_seed():
    a = make_inputs((2, 4, 50), seed=7, dtype="bfloat16")
    b = make_inputs((2, 4, 50), seed=7, dtype=torch.bfloat16)
    c = make_inputs((2, 4, 50), seed=8, dtype="bfloat16")
    assert torch.equal(a["q"], b["q"]) and torch.equal(a["kv"], b["kv"])
    assert not torch.equal(a["q"], c["q"]) and not torch.equal(a["kv"], c["kv"])
    assert a["q"].shape == (2, 4, 576) and a["kv"].shape == (2, 50, 576) and a["q"].dtype == torch.bfloat16
    # Drawn in every regime around 1 / sqrt(192): no regime tells itself by its scale.
    assert a["scale"] == b["scale"] != c["scale"] and 0.5 <= a["scale"] * math.sqrt(192) <= 2.0


def test_softmax_is_neither_flat_nor_one_hot():
    inputs = make_inputs((1, 16, 4096), seed=1, dtype="float32")
    probs = torch.softmax(inputs["scale"] * torch.einsum("bhd,bsd->bhs", inputs["q"], inputs["kv"]), -1)
    support = (1.0 / probs.pow(2).sum(-1)).median().item()
    assert 10 < support < 0.2 * 4096


def test_flop_and_byte_models_match_the_research_numbers():
    assert flops((1, 64, 8192)) == 1_140_850_688
    assert bytes_moved((1, 64, 8192), "bfloat16") == 9_576_448
    assert bytes_moved((1, 64, 8192), "float32") == 2 * 9_576_448
    assert PROBLEM.output((3, 16, 100), "bfloat16") == ((3, 16, 512), "bfloat16")


@pytest.mark.parametrize("shape", CPU_SHAPES + ODD_SHAPES, ids=shape_id)
def test_kernel_matches_reference(shape):
    inputs = make_inputs(shape, seed=shape[2], dtype="float32")
    out = mla_decode(**inputs)
    assert out.shape == (shape[0], shape[1], 512) and out.dtype == torch.float32
    assert rel_rms(out, reference(**inputs)) < TOL32


def test_kernel_writes_every_output_and_reads_every_split():
    inputs = make_inputs((2, 3, 130), seed=2, dtype="float32")
    q, kv = inputs["q"], inputs["kv"]
    plan = split_plan(2, 3, 130)
    assert plan["num_splits"] > 1
    out = torch.full((2, 3, 512), float("nan"))
    o_part = torch.full((2, 3, plan["num_splits"], 512), float("nan"))
    lse_part = torch.full((2, 3, plan["num_splits"]), float("nan"))
    mla_decode_into(q, kv, inputs["scale"], out, o_part, lse_part, plan)
    assert torch.isfinite(out).all() and torch.isfinite(o_part).all() and torch.isfinite(lse_part).all()
    assert rel_rms(out, reference(**inputs)) < TOL32


def test_one_split_writes_the_output_itself_and_never_touches_the_partials():
    inputs = make_inputs((2, 3, 60), seed=6, dtype="float32")
    plan = split_plan(2, 3, 60)
    assert plan["num_splits"] == 1
    out = torch.full((2, 3, 512), float("nan"))
    o_part = torch.full((2, 3, 1, 512), float("nan"))
    lse_part = torch.full((2, 3, 1), float("nan"))
    mla_decode_into(inputs["q"], inputs["kv"], inputs["scale"], out, o_part, lse_part, plan)
    assert torch.isnan(o_part).all()  # the combine's copy is skipped
    assert rel_rms(out, reference(**inputs)) < TOL32
    assert rel_rms(mla_decode(**inputs), reference(**inputs)) < TOL32


def test_fused_kernel_with_one_program_combines_and_leaves_the_barrier_reset():
    # The interpreter runs programs one at a time, so only a one-program grid can pass the
    # barrier here; bigger grids of the fused kernel are checked on the GPU.
    inputs = make_inputs((1, 5, 200), seed=4, dtype="float32")
    q, kv = inputs["q"], inputs["kv"]
    plan = {**split_plan(1, 5, 200), "block_h": 16, "head_blocks": 1, "split_len": 256, "num_splits": 1}
    out = torch.full((1, 5, 512), float("nan"))
    o_part = torch.full((1, 5, 1, 512), float("nan"))
    lse_part = torch.full((1, 5, 1), float("nan"))
    sync = torch.tensor([0, 41], dtype=torch.int32)
    for round_ in range(2):
        out.fill_(float("nan"))
        mla_decode_into(q, kv, inputs["scale"], out, o_part, lse_part, plan, sync)
        assert rel_rms(out, reference(**inputs)) < TOL32
        assert sync.tolist() == [0, 42 + round_]  # arrivals back to 0, one generation per launch


def test_fused_path_is_never_taken_off_cuda():
    plan = split_plan(1, 64, 8192)
    assert not fused_fits(plan, 1, torch.device("cpu"))


@pytest.mark.parametrize("batch,heads,seq", [(1, 64, 8192), (1, 128, 8192), (32, 64, 8192), (64, 128, 4096),
                                             (1, 64, 65536), (1, 3, 1), (3, 64, 777), (2, 16, 4097)])
def test_split_plan_covers_the_sequence_without_empty_splits(batch, heads, seq):
    plan = split_plan(batch, heads, seq)
    assert plan["split_len"] % plan["block_n"] == 0
    assert (plan["num_splits"] - 1) * plan["split_len"] < seq <= plan["num_splits"] * plan["split_len"]
    assert plan["head_blocks"] * plan["block_h"] >= heads
    assert plan["block_h"] >= 16


SMALL_CLASS = {"small_batch_heads": 256, "small_block_h": 16, "small_block_n": 32, "small_num_warps": 4,
               "small_num_stages": 4, "small_min_split_tokens": 256, "small_pdl": True}


@pytest.fixture
def small_class(monkeypatch):
    """CONFIG with the small-batch class on (batch x heads <= 256), plans recomputed."""
    for key, value in SMALL_CLASS.items():
        monkeypatch.setitem(CONFIG, key, value)
    split_plan.cache_clear()
    yield
    split_plan.cache_clear()


def test_small_batches_take_the_small_knobs_and_large_ones_the_plain(small_class):
    small, large = split_plan(1, 64, 8192), split_plan(32, 64, 8192)
    assert (small["block_h"], small["block_n"], small["num_warps"], small["num_stages"], small["pdl"]) == \
        (16, 32, 4, 4, True)
    # Four head blocks of 16 share the sequence: 32 splits of 256 tokens fill one wave of 128.
    assert (small["head_blocks"], small["num_splits"], small["split_len"]) == (4, 32, 256)
    assert (large["block_h"], large["block_n"], large["num_warps"], large["pdl"]) == \
        (CONFIG["block_h"], CONFIG["block_n"], CONFIG["num_warps"], CONFIG["pdl"])
    assert split_plan(2, 128, 64)["block_n"] == 32 and split_plan(2, 129, 64)["block_n"] == CONFIG["block_n"]


def test_two_programs_per_sm_for_small_batches(small_class, monkeypatch):
    monkeypatch.setitem(CONFIG, "small_sm_count", 264)
    monkeypatch.setitem(CONFIG, "small_min_split_tokens", 64)
    split_plan.cache_clear()
    plan = split_plan(1, 64, 8192)
    assert plan["head_blocks"] * plan["num_splits"] == 256 and plan["split_len"] == 128
    assert split_plan(32, 64, 8192)["head_blocks"] * split_plan(32, 64, 8192)["num_splits"] <= CONFIG["sm_count"]


@pytest.mark.parametrize("shape", ((1, 16, 300), (2, 5, 700)), ids=shape_id)
def test_kernel_matches_reference_with_the_small_batch_knobs(small_class, shape):
    inputs = make_inputs(shape, seed=11, dtype="float32")
    assert split_plan(*shape)["num_splits"] > 1
    assert rel_rms(mla_decode(**inputs), reference(**inputs)) < TOL32


def test_launch_options_are_cuda_only(small_class):
    plan = split_plan(1, 64, 8192)
    assert plan["pdl"] and not programmatic_combine(plan, torch.device("cpu"))
    assert not warp_specialized({**plan, "warp_specialize": True}, torch.device("cpu"))


def test_headline_plan_fills_the_gpu():
    plan = split_plan(1, 64, 8192)
    assert plan["head_blocks"] == 1  # one program owns all 64 heads of its KV slice
    assert plan["num_splits"] * plan["head_blocks"] >= 64


@pytest.mark.parametrize(
    "q_shape,kv_shape,scale,message",
    [
        ((1, 4, 512), (1, 10, 576), 0.1, "q must be [B, H, 576], got (1, 4, 512)"),
        ((1, 4, 576), (1, 10, 512), 0.1, "kv must be [B, S, 576], got (1, 10, 512)"),
        ((2, 4, 576), (3, 10, 576), 0.1, "q has batch 2 but kv has batch 3"),
        ((1, 4, 576), (1, 0, 576), 0.1, "S=0"),
        ((1, 4, 576), (1, 10, 576), -1.0, "scale must be a positive finite number, got -1.0"),
        ((1, 4, 576), (1, 10, 576), float("nan"), "scale must be a positive finite number"),
    ],
)
def test_input_checks_name_the_numbers(q_shape, kv_shape, scale, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        mla_decode(torch.zeros(q_shape), torch.zeros(kv_shape), scale)


def test_input_checks_reject_mixed_dtypes_and_strided_rows():
    with pytest.raises(ValueError, match="share a dtype"):
        mla_decode(torch.zeros(1, 4, 576), torch.zeros(1, 10, 576, dtype=torch.float64), 0.1)
    with pytest.raises(ValueError, match="q and kv must be contiguous"):
        mla_decode(torch.zeros(1, 4, 576), torch.zeros(1, 576, 10).transpose(1, 2), 0.1)


def test_cpu_baseline_is_eager_and_correct():
    fns = baselines("cpu")
    assert list(fns) == ["eager"]
    inputs = make_inputs((2, 3, 130), seed=4, dtype="float32")
    assert rel_rms(fns["eager"](**inputs), reference(**inputs)) < TOL32


def test_importing_the_definition_does_not_import_triton():
    code = "import sys, kernels.mla, kernels.mla.definition; print('triton' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


# The value-split streaming kernel (value_split 2): two programs per (split, head block), each
# accumulating half of the 512 value dims; small tiles so that several splits and tiles run.
VALUE_SPLIT = {"value_split": 2, "block_n": 16, "block_h": 16, "num_warps": 4, "min_split_tokens": 32}


@pytest.fixture
def value_split(monkeypatch):
    for key, value in VALUE_SPLIT.items():
        monkeypatch.setitem(CONFIG, key, value)
    split_plan.cache_clear()
    yield
    split_plan.cache_clear()


@pytest.mark.parametrize("shape", CPU_SHAPES + ODD_SHAPES, ids=shape_id)
def test_value_split_kernel_matches_reference(value_split, shape):
    inputs = make_inputs(shape, seed=shape[2] + 1, dtype="float32")
    assert split_plan(*shape)["value_split"] == 2
    out = mla_decode(**inputs)
    assert out.shape == (shape[0], shape[1], 512) and out.dtype == torch.float32
    assert rel_rms(out, reference(**inputs)) < TOL32


@pytest.mark.parametrize("shape", ((1, 4, 63), (2, 3, 130)), ids=shape_id)
def test_value_split_kernel_in_fp16(value_split, shape):
    inputs = make_inputs(shape, seed=5, dtype="float16")
    out = mla_decode(**inputs)
    assert out.dtype == torch.float16
    assert rel_rms(out, reference(**inputs)) < PROBLEM.tolerance["float16"]


def test_value_split_writes_both_halves_of_every_partial():
    # Poisoned buffers: each half of every partial row comes from its own program, and the lse
    # only from the first; the combine reads them all.
    inputs = make_inputs((2, 3, 130), seed=8, dtype="float32")
    plan = {**split_plan(2, 3, 130), "block_n": 16, "block_h": 16, "split_len": 48, "num_splits": 3,
            "value_split": 2}
    out = torch.full((2, 3, 512), float("nan"))
    o_part = torch.full((2, 3, 3, 512), float("nan"))
    lse_part = torch.full((2, 3, 3), float("nan"))
    mla_decode_into(inputs["q"], inputs["kv"], inputs["scale"], out, o_part, lse_part, plan)
    assert torch.isfinite(o_part).all() and torch.isfinite(lse_part).all()
    assert rel_rms(out, reference(**inputs)) < TOL32


def test_value_split_plan_counts_both_halves_as_programs(value_split, monkeypatch):
    monkeypatch.setitem(CONFIG, "block_h", 64)
    monkeypatch.setitem(CONFIG, "block_n", 64)
    split_plan.cache_clear()
    plan = split_plan(1, 64, 8192)
    # Two value halves per split: 66 splits of 128 tokens (64 of them non-empty) fill 132 SMs.
    assert plan["value_split"] == 2 and plan["num_splits"] * 2 <= CONFIG["sm_count"]
    assert plan["num_splits"] * plan["split_len"] >= 8192 and plan["split_len"] == 128
    assert not fused_fits({**plan, "num_splits": 1}, 1, torch.device("cpu"))
