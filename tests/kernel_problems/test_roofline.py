"""The card's ceilings (datasheet and measured) and the roofline built on them."""

import dataclasses

import pytest

from kernels import bench, roofline
from kernels.judge import physics
from kernels.mla.definition import PROBLEM

HEADLINE = (1, 64, 8192)


def test_roofline_of_the_mla_headline_is_memory_bound():
    flops, nbytes = roofline.work(PROBLEM, HEADLINE, "bfloat16")
    floor = roofline.MEASURED.floor_ms(flops, nbytes, "bfloat16")
    assert floor == pytest.approx(9_576_448 / 4.3e12 * 1e3)
    assert floor == pytest.approx(0.002227, rel=1e-3)


def test_roofline_takes_the_compute_term_when_it_is_larger():
    assert roofline.floor_ms(790e12, 1.0, 790.0, 4.3) == pytest.approx(1000.0)
    with pytest.raises(ValueError, match="peak=0"):
        roofline.floor_ms(1.0, 1.0, 0.0, 4.3)


def test_the_two_ceilings_are_named_and_the_datasheet_is_the_higher():
    assert (roofline.DATASHEET.source, roofline.MEASURED.source) == ("datasheet", "measured")
    assert roofline.DATASHEET.peak_tflops("bfloat16") == 989.0 and roofline.DATASHEET.bandwidth_tbs == 4.8
    assert roofline.MEASURED.peak_tflops("bfloat16") == 790.0 and roofline.MEASURED.bandwidth_tbs == 4.3
    # The datasheet holds every dtype to the bf16 rate (a generous floor); the measured fp32 rate is TF32's.
    assert roofline.DATASHEET.peak_tflops("float32") == 989.0 and roofline.MEASURED.peak_tflops("float32") == 395.0
    flops, nbytes = roofline.work(PROBLEM, HEADLINE, "bfloat16")
    assert roofline.DATASHEET.floor_ms(flops, nbytes, "bfloat16") < roofline.MEASURED.floor_ms(flops, nbytes, "bfloat16")
    assert "790 TFLOP/s and 4.3 TB/s (H200 measured)" == roofline.MEASURED.describe("bfloat16")


def test_the_judge_uses_the_datasheet_and_the_benchmark_the_measured_ceilings():
    assert physics.CEILINGS is roofline.DATASHEET and bench.CEILINGS is roofline.MEASURED
    flops, nbytes = roofline.work(PROBLEM, HEADLINE, "bfloat16")
    assert physics.floor_ms(PROBLEM, HEADLINE, "bfloat16") == pytest.approx(nbytes / 4.8e12 * 1e3)
    assert flops == pytest.approx(2.0 * 64 * 8192 * (576 + 512))


def test_fraction_is_floor_over_time_and_refuses_no_time():
    assert roofline.fraction(0.5, 2.0) == 0.25
    assert 100.0 * roofline.fraction(0.002, 0.004) == pytest.approx(50.0)
    with pytest.raises(ValueError, match="time > 0"):
        roofline.fraction(1.0, 0.0)


def test_work_calls_every_formula_with_shape_and_dtype():
    seen = []
    toy = dataclasses.replace(
        PROBLEM,
        flops=lambda shape, dtype: seen.append(("flops", dtype)) or 2.0,
        bytes_moved=lambda shape, dtype: seen.append(("bytes", dtype)) or 8.0,
    )
    assert roofline.work(toy, (3,), "float32") == (2.0, 8.0)
    assert seen == [("flops", "float32"), ("bytes", "float32")]
    shape_only = dataclasses.replace(PROBLEM, flops=lambda shape: 1.0)
    with pytest.raises(ValueError, match="flops must take \\(shape, dtype\\)"):
        roofline.work(shape_only, (3,), "float32")
