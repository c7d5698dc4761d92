"""The problem kda-general: unbounded gates as models and FLA's tests make them, compared with
FLA's default path; the whole problem contract, the seed judged, on the CPU."""

from __future__ import annotations

import pytest
import torch

from kernels.kda import chunk
from kernels.kda.general import PROBLEM, REGIMES, make_inputs
from kernels.problem_check import check_problem


@pytest.mark.parametrize("regime", REGIMES)
def test_gates_are_unbounded_and_the_kernel_is_exact(regime):
    inputs = make_inputs((1, 70, 2, 32), seed=3, device="cpu", dtype="float32", regime=regime)
    g = inputs["g"]
    assert float(g.max()) <= 0
    lowest = {"default": -3.0, "long_memory": -0.005, "strong_decay": -25.0, "kimi": -25.0}[regime]
    assert float(g.min()) < lowest, f"{regime}: gates never go below {lowest}"
    out, final = chunk.kernel(**inputs)
    ref, ref_final = PROBLEM.load_reference()(**inputs)
    assert torch.isfinite(out).all() and torch.isfinite(final).all()
    assert float((out - ref).norm() / ref.norm()) < PROBLEM.tolerance["float32"]
    assert float((final - ref_final).norm() / ref_final.norm()) < PROBLEM.tolerance["float32"]


def test_seeded_and_distinct_per_regime():
    first = make_inputs((1, 20, 2, 16), seed=7, device="cpu", dtype="float32", regime="kimi")
    again = make_inputs((1, 20, 2, 16), seed=7, device="cpu", dtype="float32", regime="kimi")
    other = make_inputs((1, 20, 2, 16), seed=7, device="cpu", dtype="float32", regime="strong_decay")
    assert torch.equal(first["g"], again["g"]) and not torch.equal(first["g"], other["g"])
    with pytest.raises(ValueError, match="regime"):
        make_inputs((1, 20, 2, 16), seed=7, device="cpu", dtype="float32", regime="no_such_regime")


def test_baselines_are_the_matching_fla_paths():
    from kernels.kda import baseline

    assert PROBLEM.baselines == "kernels.kda.baseline:general_baselines"
    assert list(baseline.general_baselines("cpu")) == ["reference"]
    try:
        import fla  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="fla-core"):
            baseline.general_baselines("cuda")


def test_the_problem_keeps_the_contract_and_its_seed_is_judged_ok():
    findings = check_problem("kda-general")
    failed = [f for f in findings if not f.ok]
    assert not failed, failed
    assert any(f.check == "judge" for f in findings)
