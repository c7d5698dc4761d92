"""The benchmark's pure parts (rates, tables, checks); timing itself needs a GPU. The roofline: test_roofline.py."""

import io

import pytest
import torch

from kernels import bench
from kernels.mla.definition import PROBLEM


def test_throughput_units():
    tflops, gbs = bench.throughput(2e9, 4e6, 2.0)
    assert tflops == pytest.approx(1.0) and gbs == pytest.approx(2.0)
    with pytest.raises(ValueError, match="positive"):
        bench.throughput(1.0, 1.0, 0.0)


def test_relative_rms_error():
    ref = torch.tensor([3.0, 4.0])
    assert bench.relative_rms_error(ref.clone(), ref) == 0.0
    assert bench.relative_rms_error(torch.tensor([3.0, 4.5]), ref) == pytest.approx(0.1)
    assert bench.relative_rms_error(torch.tensor([float("nan"), 4.0]), ref) == float("inf")
    with pytest.raises(ValueError, match="differs"):
        bench.relative_rms_error(torch.zeros(3), ref)


def test_format_table_aligns_and_formats():
    text = bench.format_table(["shape", "ms", "x"], [["B=1", 0.0123456, None], ["B=32,H=64", 12.5, 3]])
    lines = text.splitlines()
    assert lines[0].startswith("shape") and set(lines[1]) <= {"-", " "}
    assert "0.01235" in lines[2] and lines[2].rstrip().endswith("-")
    assert len({len(line) for line in lines[:2]}) == 1
    assert lines[2].index("0.01235") + len("0.01235") == lines[0].index("ms") + len("ms")
    with pytest.raises(ValueError, match="3 cells"):
        bench.format_table(["a", "b", "c"], [[1, 2]])


def test_summarize_speedups_and_roofline():
    row = bench.summarize("B=1", "events", {"compile": 0.02, "eager": 0.04, "ours": 0.01}, "compile",
                          flops=1e9, nbytes=1e7, floor_ms=0.002)
    assert row.speedup_primary == pytest.approx(2.0) and row.speedup_best == pytest.approx(2.0)
    assert row.roofline_pct == pytest.approx(20.0) and row.gbs == pytest.approx(1000.0)
    missing = bench.summarize("B=1", "events", {"compile": 0.02, "ours": None}, "compile", 1e9, 1e7, 0.002)
    assert missing.speedup_primary is None and missing.tflops is None


def test_check_providers_flags_a_wrong_provider():
    from kernels.mla.baseline import mla_decode_torch
    from kernels.mla.decode import mla_decode

    def off_by_a_little(q, kv, scale):
        return mla_decode_torch(q, kv, scale) * 1.01

    def wrong_shape(q, kv, scale):
        return mla_decode_torch(q, kv, scale)[:, :1]

    providers = {"ours": mla_decode, "eager": mla_decode_torch, "off": off_by_a_little, "shape": wrong_shape}
    checks = bench.check_providers(PROBLEM, (1, 4, 63), providers, device="cpu", dtype="float32", seeds=(1,))
    assert checks["ours"].ok and checks["eager"].ok
    assert not checks["off"].ok and checks["off"].error == pytest.approx(0.01, rel=1e-3)
    assert not checks["shape"].ok and "must be (1, 4, 512) float32, got (1, 1, 512)" in checks["shape"].reason


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on machines without a GPU")
def test_bench_refuses_without_a_gpu(capsys):
    from marathon.commands import bench as command
    import argparse

    parser = argparse.ArgumentParser()
    command.register(parser.add_subparsers())
    args = parser.parse_args(["bench", "mla-decode", "--reps", "5"])
    assert args.handler(args) == bench.EXIT_NO_GPU
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_bench_rejects_unknown_shape_sets():
    with pytest.raises(ValueError, match="no shape set 'huge'"):
        bench.run("mla-decode", "huge", out=io.StringIO())


def test_the_summary_counts_only_the_shapes_each_timing_method_timed():
    import io

    rows = [
        bench.summarize("B=1", "events", {"compile": 0.02, "ours": 0.01}, "compile", 1e9, 1e7, 0.002),
        bench.summarize("B=1", "graph", {"compile": 0.004, "ours": 0.008}, "compile", 1e9, 1e7, 0.002),
        bench.summarize("B=2", "events", {"compile": 0.08, "ours": 0.01}, "compile", 1e9, 1e7, 0.002),
        bench.summarize("B=3", "events", {"compile": 0.02, "ours": None}, "compile", 1e9, 1e7, 0.002),
    ]
    out = io.StringIO()
    summary = bench.print_summary(rows, ["compile", "ours"], "compile", failed=True, out=out)
    assert summary["events"]["shapes"] == 2 and abs(summary["events"]["geomean_x_primary"] - 4.0) < 1e-9
    assert summary["graph"] == {"geomean_x_primary": 0.5, "geomean_x_best": 0.5, "shapes": 1}
    text = out.getvalue()
    assert "geomean (events, 2 shapes): 4x over compile" in text and "FAILED the correctness check" in text
