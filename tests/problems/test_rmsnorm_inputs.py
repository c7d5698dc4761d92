"""RMSNorm's inputs hold the rows a kernel without eps (or squaring in float16) gets wrong:
zero, tiny and huge rows mixed in among ordinary ones, and a held-out family of massive
activations. Checked on this checkout's copy of the example (the object path, not the
installed package)."""

from __future__ import annotations

import pytest
import torch

from examples.rmsnorm_residual.marathon_rmsnorm import definition
from examples.rmsnorm_residual.marathon_rmsnorm.reference import reference

PROBLEM = definition.PROBLEM


def _rms(inputs):
    return (inputs["x"].double() + inputs["residual"].double()).pow(2).mean(dim=1).sqrt()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_every_tensor_of_three_rows_or_more_holds_a_zero_a_tiny_and_a_huge_row(dtype):
    for shape in [s for s in PROBLEM.shape_set("cpu") + ((37, 1000),) if s[0] >= 3]:
        for seed in range(3):
            rms = _rms(PROBLEM.make_inputs(shape, seed, "cpu", dtype))
            assert (rms == 0).any(), (shape, seed)  # x = -residual exactly, in every dtype
            assert ((rms > 0) & (rms < 1e-3)).any(), (shape, seed)
            assert (rms > 100).any(), (shape, seed)
            assert ((rms > 1) & (rms < 10)).float().mean() > 0.5 or shape[0] <= 5  # mostly ordinary rows


def test_a_kernel_without_eps_fails_and_squares_in_float16_overflow():
    inputs = PROBLEM.make_inputs((37, 1000), 4, "cpu", "float32")
    ref = reference(**inputs).double()
    h = inputs["x"].double() + inputs["residual"].double()
    without_eps = h / h.pow(2).mean(dim=1, keepdim=True).sqrt() * inputs["weight"].double()
    assert not torch.isfinite(without_eps).all()  # NaN on the zero row
    finite = torch.isfinite(without_eps).all(dim=1)
    error = float((without_eps[finite] - ref[finite]).norm() / ref[finite].norm())
    assert error > 0.05  # the tiny rows alone: five times the truth (measured 0.3)
    squares = (inputs["x"] + inputs["residual"]).to(torch.float16).pow(2)
    assert not torch.isfinite(squares).all()  # a huge row overflows float16


def test_the_held_out_family_is_massive_activations():
    assert PROBLEM.held_out == ("massive_activations",) and "massive_activations" not in PROBLEM.regimes
    inputs = PROBLEM.make_inputs((40, 256), 2, "cpu", "float32", regime="massive_activations")
    peak = (inputs["x"] + inputs["residual"]).abs().amax(dim=0)
    assert int((peak > 100 * peak.median()).sum()) == definition.MASSIVE_CHANNELS
