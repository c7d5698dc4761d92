"""The kda-varlen problem (kernels/kda/varlen_definition.py): packed sequences of lengths drawn
from the seed, each from its own initial state; its reference is the token loop sequence by
sequence; its seed is our kernel as one standalone candidate, right under the interpreter."""

from __future__ import annotations

import ast
import random

import pytest
import torch

from kernels.judge import policy
from kernels.kda.general import make_inputs as general_inputs
from kernels.kda.reference import kda_loop_reference, kda_varlen_reference
from kernels.kda.varlen import kda_forward, packed_offsets
from kernels.kda.varlen_definition import PROBLEM, STATE_STD, make_inputs
from kernels.registry import get_problem

FP32_TOL = 1e-4


def rel_rms(out, ref) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


@pytest.mark.parametrize("regime", PROBLEM.regimes + PROBLEM.held_out)
def test_sequences_are_ragged_packed_and_drawn_from_the_seed(regime):
    sequences, total, heads, dim = 5, 90, 2, 16
    inputs = make_inputs((sequences, total, heads, dim), seed=4, dtype="float32", regime=regime)
    assert list(inputs) == list(PROBLEM.input_names)
    offsets = inputs["cu_seqlens"].tolist()
    assert inputs["cu_seqlens"].dtype == torch.int64 and len(offsets) == sequences + 1
    assert offsets[0] == 0 and offsets[-1] == total and all(b > a for a, b in zip(offsets, offsets[1:]))
    assert len({b - a for a, b in zip(offsets, offsets[1:])}) > 1  # ragged
    state = inputs["initial_state"]
    assert tuple(state.shape) == (sequences, heads, dim, dim) and state.dtype == torch.float32
    assert 0.5 * STATE_STD < float(state.std()) < 2 * STATE_STD
    # The tokens and gates are kda-general's at (1, T, H, D) for the same seed and regime.
    dense = general_inputs((1, total, heads, dim), 4, "cpu", "float32", regime)
    for name in ("q", "k", "v", "g", "beta"):
        assert torch.equal(inputs[name], dense[name]), name
    again = make_inputs((sequences, total, heads, dim), seed=4, dtype="float32", regime=regime)
    other = make_inputs((sequences, total, heads, dim), seed=5, dtype="float32", regime=regime)
    assert torch.equal(again["cu_seqlens"], inputs["cu_seqlens"]) and torch.equal(again["initial_state"], state)
    assert not torch.equal(other["cu_seqlens"], inputs["cu_seqlens"])


def test_the_reference_runs_each_sequence_from_its_own_state():
    inputs = make_inputs((3, 40, 2, 8), seed=1, dtype="float32", regime="kimi")
    out, finals = kda_varlen_reference(**inputs)
    offsets = inputs["cu_seqlens"].tolist()
    for n, (a, b) in enumerate(zip(offsets, offsets[1:])):
        part = {name: inputs[name][:, a:b] for name in ("q", "k", "v", "g", "beta")}
        want, final = kda_loop_reference(**part, scale=inputs["scale"], initial_state=inputs["initial_state"][n:n + 1],
                                         output_final_state=True)
        assert torch.allclose(out[:, a:b], want, rtol=1e-6, atol=1e-7), n
        assert torch.allclose(finals[n:n + 1], final, rtol=1e-6, atol=1e-7), n


def test_our_kernel_matches_on_the_problems_inputs():
    inputs = make_inputs((3, 100, 1, 32), seed=2, dtype="float32", regime="strong_decay")
    out, final = kda_forward(inputs["q"], inputs["k"], inputs["v"], inputs["g"], inputs["beta"], inputs["scale"],
                             inputs["initial_state"], True, inputs["cu_seqlens"])
    ref, ref_final = kda_varlen_reference(**inputs)
    assert rel_rms(out, ref) < FP32_TOL and rel_rms(final, ref_final) < FP32_TOL


def test_the_probe_packs_one_token_sequences():
    offsets = make_inputs((6, 40, 1, 8), seed=3, dtype="float32", regime="probe")["cu_seqlens"].tolist()
    lengths = [b - a for a, b in zip(offsets, offsets[1:])]
    assert offsets[-1] == 40 and lengths[:3] == [1, 1, 1] and min(lengths) >= 1


def test_shapes_say_what_is_wrong():
    with pytest.raises(ValueError, match=r"N = 9 > T = 8"):
        make_inputs((9, 8, 1, 16), seed=0)
    with pytest.raises(ValueError, match=r"\(N, T, H, D\)"):
        make_inputs((1, 8, 16), seed=0)
    rng = random.Random(0)
    for _ in range(50):
        sequences, total, _, _ = PROBLEM.vary_shape((7, 8, 1, 16), rng)
        assert sequences == 7 and total >= 7
    q = torch.zeros(1, 10, 1, 4)
    with pytest.raises(ValueError, match="never decrease"):
        packed_offsets(q, torch.tensor([0, 6, 4, 10]))
    with pytest.raises(ValueError, match="end at T = 10"):
        packed_offsets(q, torch.tensor([0, 6, 9]))
    with pytest.raises(ValueError, match="batch must be 1"):
        packed_offsets(torch.zeros(2, 10, 1, 4), torch.tensor([0, 10]))


def test_the_seed_is_a_standalone_candidate_of_the_packed_kernel():
    problem = get_problem("kda-varlen")
    source = problem.seed_source()
    assert policy.scan(source) == []
    tree = ast.parse(source)
    kernels = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "kernel"]
    assert len(kernels) == 1 and [a.arg for a in kernels[0].args.args] == list(problem.input_names)
    space = problem.load_space()
    assert space.SPACE == get_problem("kda").load_space().SPACE
    point = {**space.DEFAULT, "chunk": 16}
    assert '"chunk": 16' in space.render(point)
