"""The baselines' warm-up a GPU worker runs before it polls (kernels/judge/warm.py), exercised on
the CPU with the toy problem (its verify shapes: small) in the referee's own environment."""

from __future__ import annotations

from kernels.judge.warm import warm_baselines, warm_in_process
from tests.judge.corpus import TOY
from tests.judge.toy import PROBLEM as TOY_PROBLEM


def test_each_baseline_runs_at_each_shape_in_a_referee_like_process():
    records = warm_baselines([TOY, "nope"], "cpu", timeout_s=120, shape_set="verify")
    good = [r for r in records if "error" not in r]
    bad = [r for r in records if "error" in r]
    assert good and all(r["problem"] == TOY and r["seconds"] >= 0 for r in good)
    assert {tuple(r["shape"]) for r in good} == {tuple(s) for s in TOY_PROBLEM.shape_set("verify")}
    # An unknown problem is reported, and does not stop the others.
    assert [r["problem"] for r in bad] == ["nope"] and "unknown problem" in bad[0]["error"]


def test_a_warm_up_that_runs_too_long_says_so():
    records = warm_baselines([TOY], "cpu", timeout_s=0.01, shape_set="verify")
    assert records == [{"error": "the baselines' warm-up did not finish within 0 s"}]


def test_in_process_records_per_shape():
    records = warm_in_process([TOY], "cpu", shape_set="cpu")
    assert records and all("seconds" in r for r in records)
