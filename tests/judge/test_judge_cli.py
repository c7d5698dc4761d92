"""``marathon judge``: exit codes and output."""

from __future__ import annotations

import json

import pytest

from kernels.judge.runner import has_gpu
from marathon.cli import main
from tests.judge.corpus import CANDIDATES, TOY


def test_accepted_candidate_exits_zero_with_json(capsys):
    code = main(["judge", str(CANDIDATES / "honest_cumsum.py"), "--problem", TOY, "--device", "cpu",
                 "--reps", "1", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    report = json.loads(out)
    assert report["status"] == "ok" and report["accepted"] is True
    assert report["timing_kind"] == "interpreter" and report["speedup"] > 0


def test_rejected_candidate_exits_one(capsys):
    code = main(["judge", str(CANDIDATES / "import_fla.py"), "--problem", TOY, "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 1
    assert out.startswith("forbidden: line 33: import of third-party kernel library 'fla.ops.kda'")


def test_usage_errors_exit_two(capsys, tmp_path):
    assert main(["judge", str(tmp_path / "missing.py"), "--problem", TOY]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["judge", str(CANDIDATES / "honest_cumsum.py"), "--problem", "nope"]) == 2
    assert "unknown problem 'nope'; known problems: kda, kda-general, kda-varlen, mla-decode, mla-decode-paged" in capsys.readouterr().err
    assert main(["judge", str(CANDIDATES / "honest_cumsum.py"), "--problem", TOY, "--seeds", "0"]) == 2


def test_ncu_flag_parses_and_defaults_off():
    from marathon.cli import build_parser

    base = ["judge", str(CANDIDATES / "honest_cumsum.py"), "--problem", TOY]
    assert build_parser().parse_args(base).ncu is False
    assert build_parser().parse_args(base + ["--ncu", "--device", "cuda"]).ncu is True


def test_ncu_with_device_cpu_is_a_usage_error(capsys):
    code = main(["judge", str(CANDIDATES / "honest_cumsum.py"), "--problem", TOY, "--device", "cpu", "--ncu"])
    captured = capsys.readouterr()
    assert code == 2
    assert "--ncu profiles GPU kernels with Nsight Compute; it cannot be combined with --device cpu" in captured.err
    assert captured.out == ""  # refused before any judgement ran


@pytest.mark.skipif(has_gpu(), reason="this machine has a GPU: --ncu may run here")
def test_ncu_without_a_gpu_is_a_usage_error(capsys):
    code = main(["judge", str(CANDIDATES / "honest_cumsum.py"), "--problem", TOY, "--ncu"])
    captured = capsys.readouterr()
    assert code == 2
    assert "--ncu needs a GPU and this machine has none" in captured.err
    assert captured.out == ""


@pytest.mark.parametrize("problem,path", [("mla-decode", "kernels/mla/decode.py"), ("kda", "kernels/kda/chunk.py")])
def test_the_cli_accepts_our_own_kernels(capsys, problem, path):
    from pathlib import Path

    source = Path(__file__).resolve().parents[2] / path
    code = main(["judge", str(source), "--problem", problem, "--device", "cpu", "--reps", "1", "--json"])
    out = capsys.readouterr().out
    report = json.loads(out)
    assert code == 0, report["message"]
    assert (report["status"], report["problem"], report["timing_kind"]) == ("ok", problem, "interpreter")


def test_the_gpu_lease_setting_reaches_the_judge(capsys, monkeypatch, tmp_path):
    """``MARATHON_GPU_LEASE`` is read at the CLI's edge (the settings) and handed to the judge, which
    reads no environment for it: a CPU judgement takes a lease only when given one."""
    from marathon.settings import get_settings

    lease = tmp_path / "shared.lease"
    monkeypatch.setenv("MARATHON_GPU_LEASE", str(lease))
    get_settings.cache_clear()
    try:
        code = main(["judge", str(CANDIDATES / "honest_cumsum.py"), "--problem", TOY, "--device", "cpu",
                     "--reps", "1", "--json"])
    finally:
        get_settings.cache_clear()
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    assert "lease_wait" in report["phases"] and lease.exists()
