"""The evaluate activity's profile: when it asks the judge for Nsight Compute, and the figures it
keeps of a report (ncu summary, roofline and its nearest ceiling). The judge runs for real, in CPU
mode, on its toy problem."""

from __future__ import annotations

import dataclasses
import stat
import threading
from pathlib import Path

import pytest

from activities.evaluate import Evaluator, ncu_request, profile_figures, roofline_limit
from kernels.judge import ncu
from kernels.judge.environment import has_gpu
from workflows.types import EvaluateInput

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "judge" / "data" / "ncu_details.csv"
HONEST = (ROOT / "tests" / "judge" / "candidates" / "honest_cumsum.py").read_text()
TOY = "tests.judge.toy:PROBLEM"


def test_ncu_is_asked_for_only_on_a_gpu_with_ncu_on_path(tmp_path, monkeypatch):
    assert ncu_request(False, "cuda") == (False, "")
    assert ncu_request(True, "cpu") == (False, "evaluated on the cpu: Nsight Compute profiles GPU kernels only")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert ncu_request(True, "cuda") == (False, "ncu is not on this evaluation worker's PATH")
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert ncu_request(True, "cuda") == (True, "")
    # None: the judge picks the device, cuda only where there is a GPU.
    assert ncu_request(True, None) == ((True, "") if has_gpu() else
                                       (False, "evaluated on the cpu: Nsight Compute profiles GPU kernels only"))


@pytest.mark.skipif(has_gpu(), reason="this machine has a GPU: the cpu judgement is asked for explicitly below")
def test_judge_without_a_gpu_is_not_asked_for_ncu_and_the_report_says_why():
    request = EvaluateInput(run_id="r", iteration=1, index=0, problem=TOY, source_sha="x", device="auto",
                            confirm=True, timeout_s=300.0, profile=True)
    report = Evaluator._judge(HONEST, request, None, threading.Event())
    assert report.status == "ok", report.message
    assert report.device == "cpu" and report.ncu is None
    assert report.ncu_reason == "evaluated on the cpu: Nsight Compute profiles GPU kernels only"
    figures = profile_figures(report.to_dict())
    assert figures["ncu_reason"] == report.ncu_reason and "sol_pct" not in figures
    # Not a confirmation: nothing asked, nothing said.
    plain = Evaluator._judge(HONEST, dataclasses.replace(request, profile=False), "cpu", threading.Event())
    assert plain.ncu_reason == "ncu profiling not requested" and "ncu_reason" not in profile_figures(plain.to_dict())


def test_profile_figures_keep_the_ncu_summary_and_the_roofline_position():
    report = {
        "problem": "mla-decode",
        "roofline": 0.31234,
        "shapes": [{"dims": [1, 64, 8192], "roofline": 0.3, "limit": "memory"},
                   {"dims": [32, 64, 8192], "roofline": 0.33, "limit": "memory"},
                   {"dims": [1, 16, 64], "speedup": 1.2}],  # no roofline: not on the roofline
        "resources": {"_fwd": {"registers": 96, "spills": 0, "shared_bytes": 1024}},
        "ncu": ncu.parse_csv(FIXTURE.read_text()),
        "ncu_reason": "measured with ncu",
    }
    figures = profile_figures(report)
    assert figures == {
        "kernels": 1, "registers": 96, "spills": 0, "shared_bytes": 1024, "roofline": 0.3123,
        "roofline_limit": "memory", "sol_pct": 71.8, "dram_pct": 71.8, "sm_pct": 38.0, "occupancy_pct": 23.4,
        "nearest_limit": "memory", "spill_sectors": 3072, "stalls": "long_scoreboard 49%, barrier 17%, wait 10%",
    }
    # Registers come from ncu when the judge recorded no resources.
    assert profile_figures({**report, "resources": {}})["registers"] == 168


def test_the_judge_says_which_ceiling_sets_each_floor():
    from kernels.judge import physics
    from kernels.registry import get_problem

    mla, kda = get_problem("mla-decode"), get_problem("kda")
    assert physics.limit(mla, (1, 64, 8192), mla.gpu_dtype) == "memory"
    assert physics.limit(mla, (1, 128, 8192), mla.gpu_dtype) == "compute"
    assert physics.limit(kda, (1, 8192, 16, 128), kda.gpu_dtype) == "memory"


def test_roofline_limit_reads_the_judges_word_for_every_shape_on_the_roofline():
    def shapes(*limits):
        return [{"dims": [1, 64, 8192], "roofline": 0.5, "limit": limit} for limit in limits]

    # The report says it: the activity loads no problem (a registered one may not even load here).
    assert roofline_limit({"problem": "no-such-problem", "shapes": shapes("memory")}) == "memory"
    assert roofline_limit({"problem": "mla-decode", "shapes": shapes("compute", "compute")}) == "compute"
    assert roofline_limit({"problem": "mla-decode", "shapes": shapes("memory", "compute")}) == "mixed"
    assert roofline_limit({"problem": "kda", "shapes": [{"dims": [1, 8192, 16, 128]}]}) is None  # CPU: no roofline


def test_a_referee_failure_is_retried_not_recorded_as_the_candidates_verdict():
    from temporalio.exceptions import ApplicationError

    request = EvaluateInput(run_id="r", iteration=1, index=0, problem="tests.judge.toy:FAILING_BASELINE",
                            source_sha="x", device="cpu", confirm=False, timeout_s=300.0, profile=False)
    with pytest.raises(ApplicationError) as raised:
        Evaluator._judge(HONEST, request, "cpu", threading.Event())
    assert raised.value.type == "RefereeFailure" and not raised.value.non_retryable
    assert "not the candidate" in str(raised.value)
