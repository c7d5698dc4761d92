"""What a problem's ``tolerance`` says, and how the judge compares an output by it: exactly for
integer and bool outputs, by relative RMS or elementwise allclose for floats, per device when a
``"cuda:<dtype>"`` key is given (kernels/judge/compare.py); judged for real on the CPU with a
problem whose input is a bool mask and whose output is int64 (tests/problems/argmin.py)."""

from __future__ import annotations

import pytest
import torch

from kernels.judge import compare, judge
from kernels.problem import place_inputs
from tests.problems import argmin


def test_integer_and_bool_outputs_are_compared_exactly_whatever_the_tolerance_says():
    rule = compare.rule_for({"int64": 0.5}, "cpu", "int64")
    assert rule.kind == "exact" and compare.rule_for({}, "cuda", "bool").kind == "exact"
    ref = torch.arange(1 << 25, (1 << 25) + 8)  # above float32's exact integers: a float compare misses it
    off = ref.clone()
    off[3] += 1
    assert compare.compare(ref.clone(), ref, rule)[0]
    ok, _, why = compare.compare(off, ref, rule)
    assert not ok and why == "1 of 8 values differ from the reference (compared exactly)"
    assert compare.relative_rms(off.float(), ref.float()) < 1e-7  # what the float comparison would have seen
    _, why = compare.unusable(ref.float(), rule)
    assert why.startswith("output dtype float32: this output is compared exactly")


def test_allclose_fails_one_bad_element_that_relative_rms_lets_through():
    ref = torch.linspace(-1, 1, 10_000)
    out = ref.clone()
    out[1234] += 0.05
    assert compare.compare(out, ref, compare.Rule("rms", rms=1e-2))[0]
    ok, error, why = compare.compare(out, ref, compare.rule_for({"float32": {"atol": 1e-2, "rtol": 1e-2}}, "cpu",
                                                                "float32"))
    assert not ok and error < 1e-2
    assert why.startswith("1 of 10000 values outside |out - ref| <= 1.0e-02 + 1.0e-02|ref| (worst at (1234,)")


def test_a_device_key_is_looked_up_before_the_dtype_alone():
    tolerance = {"float32": 1e-5, "cuda:float32": {"atol": 1e-3, "rtol": 1e-3}}
    assert compare.rule_for(tolerance, "cpu", "float32") == compare.Rule("rms", rms=1e-5)
    assert compare.rule_for(tolerance, "cuda", "float32") == compare.Rule("allclose", atol=1e-3, rtol=1e-3)
    with pytest.raises(ValueError, match=r"no tolerance for a bfloat16 output on cuda: add tolerance\['bfloat16'\]"):
        compare.rule_for(tolerance, "cuda", "bfloat16")
    assert compare.entry_problem("float32", {"atol": 0, "rtol": 0}).startswith("tolerance['float32'] = ")


def test_place_inputs_keeps_fixed_dtypes_and_casts_the_rest():
    placed = place_inputs({"x": torch.ones(2), "mask": torch.tensor([True, False]), "scale": 2.0}, "cpu",
                          "bfloat16", {"mask": "bool"})
    assert list(placed) == ["x", "mask", "scale"]
    assert placed["x"].dtype == torch.bfloat16 and placed["mask"].dtype == torch.bool and placed["scale"] == 2.0


def _judge(source: str):
    return judge(source, "tests.problems.argmin:PROBLEM", device="cpu", seeds=2)


def test_the_judge_accepts_an_exact_int64_output_and_refuses_a_float_one_or_one_index_off():
    accepted = _judge(argmin.render(argmin.DEFAULT))
    assert accepted.status == "ok", accepted.message
    assert accepted.to_dict()["shapes"][0]["comparison"] == "exact"
    as_float = _judge(argmin.render_float_output(argmin.DEFAULT))
    # The candidate's process says so first (a friendly check); the referee would refuse it too.
    assert as_float.status == "incorrect" and "output must be (5,) int64, got (5,) float32" in as_float.message
    off = _judge(argmin.render_off_by_one(argmin.DEFAULT))
    assert off.status == "incorrect" and "values differ from the reference (compared exactly)" in off.message
