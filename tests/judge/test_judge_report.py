"""The parts of the judge that need no candidate process: report, scoring, environment, capture."""

from __future__ import annotations

import json

import pytest

from kernels.judge import JudgeReport
from kernels.judge import runner
from kernels.judge.physics import floor_ms
from kernels.registry import get_problem


def test_report_round_trips_through_json():
    report = JudgeReport(status="ok", message="accepted", speedup=1.5, shapes=[{"shape": "B=1", "max_error": 1e-7}],
                         resources={"k": {"registers": 32}}, fingerprint={"torch": "2"}, candidate_sha256="ab")
    data = json.loads(json.dumps(report.to_dict()))
    assert data["accepted"] is True
    again = JudgeReport.from_dict(data)
    assert again == report


def test_report_refuses_unknown_status_and_keeps_json_safe():
    with pytest.raises(ValueError, match="status must be one of"):
        JudgeReport(status="great")
    data = JudgeReport(status="incorrect", shapes=[{"errors": {"seed0": float("inf")}}]).to_dict()
    assert data["shapes"][0]["errors"]["seed0"] is None and data["accepted"] is False


def _timed(cand_ms, base_ms, cand_wall=None, base_wall=None, cand_outside=None, base_outside=None, calls=5):
    """Two batches per provider as the caller records them: reported times and its own clock."""
    def batches(ms, wall, outside):
        wall = wall or ms * 1.05
        outside = outside or wall * 1.1
        return [{"event_ms": [ms] * calls, "wall_ms": [wall] * calls, "outside_ms": outside * calls, "calls": calls}] * 2

    return {"candidate": batches(cand_ms, cand_wall, cand_outside), "baseline": batches(base_ms, base_wall, base_outside)}


def _score(device, timing, shape=(4, 1024, 64)):
    import random

    from kernels.judge import plan as planning, scoring

    spec = get_problem("tests.judge.toy:PROBLEM")
    the_plan = planning.build(spec, cpu=device == "cpu", seeds=2, reps=10, warmup=1, rng=random.Random(0))
    the_plan.bench[0].shape = list(shape)
    data = {"timings": [{"shape": list(shape), **timing}], "baseline": "torch", "resources": {},
            "errors": {the_plan.checks[0].key: 1e-7}}

    def finish(status, message, **fields):
        return JudgeReport(status=status, message=message, **fields)

    return scoring.scored(spec, the_plan, data, device, finish, {})


def test_gpu_scoring_gives_speedup_roofline_and_floor():
    spec = get_problem("tests.judge.toy:PROBLEM")
    floor = floor_ms(spec, (4, 1024, 64), "float32")
    report = _score("cuda", _timed(cand_ms=10 * floor, base_ms=20 * floor))
    assert report.status == "ok", report.message
    assert report.speedup == pytest.approx(2.0)
    assert report.roofline == pytest.approx(0.1)
    timed = next(s for s in report.shapes if "timing" in s)
    assert timed["floor_ms"] == pytest.approx(floor)
    assert timed["timing"]["candidate"]["outside_ms_per_call"] == pytest.approx(10 * floor * 1.05 * 1.1)


def test_time_below_the_physical_floor_is_suspicious():
    spec = get_problem("tests.judge.toy:PROBLEM")
    floor = floor_ms(spec, (4, 1024, 64), "float32")
    report = _score("cuda", _timed(cand_ms=0.2 * floor, base_ms=20 * floor))
    assert report.status == "suspicious"
    assert "below half the physical floor" in report.message


def test_work_hidden_from_the_events_is_suspicious():
    report = _score("cuda", _timed(cand_ms=0.01, base_ms=0.5, cand_wall=0.6, base_wall=0.52))
    assert report.status == "suspicious"
    assert "outside the timed stream" in report.message


def test_times_the_callers_clock_does_not_confirm_are_suspicious():
    # The candidate's own wall clock agrees with its events; only the caller's clock sees the work.
    report = _score("cuda", _timed(cand_ms=0.01, base_ms=0.5, cand_wall=0.011, cand_outside=0.6, base_outside=0.6))
    assert report.status == "suspicious"
    assert "the judge's clock saw" in report.message


def test_a_batch_reporting_more_time_than_the_callers_clock_is_impossible():
    from kernels.judge import plan as planning, scoring
    from kernels.judge.children import Stop

    batch = planning.Batch(slot=0, holds=0, calls=2, digest_seed=1, candidate_first=True)
    reply = {"event_ms": [5.0, 5.0], "wall_ms": [6.0, 6.0], "digests": [[0.0], [0.0]]}
    scoring.check_batch(reply, batch, outside_ms=12.5, label="x")  # fits
    with pytest.raises(Stop, match="impossible times"):
        scoring.check_batch(reply, batch, outside_ms=8.0, label="x")
    with pytest.raises(Stop, match="2 times and 1 outputs"):
        scoring.check_batch({**reply, "digests": [[0.0]]}, batch, outside_ms=20.0, label="x")


def test_interpreter_scoring_has_speedup_but_no_roofline():
    report = _score("cpu", _timed(cand_ms=30.0, base_ms=0.3))
    assert report.status == "ok"
    assert report.speedup == pytest.approx(0.01)
    timed = next(s for s in report.shapes if "timing" in s)
    assert report.roofline is None and "floor_ms" not in timed


def test_child_environment_is_an_allow_list(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-1")
    monkeypatch.setenv("MARATHON_LLM_API_KEY", "sk-2")
    monkeypatch.setenv("DATABASE_URL", "postgresql://u:p@h/d")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("TRITON_API_TOKEN", "x")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    env = runner.child_env(str(tmp_path), "cpu")
    assert not {"OPENAI_API_KEY", "MARATHON_LLM_API_KEY", "DATABASE_URL", "AWS_SECRET_ACCESS_KEY",
                "TRITON_API_TOKEN"} & set(env)
    assert env["HOME"] == env["TMPDIR"] == str(tmp_path)
    assert env["TRITON_INTERPRET"] == "1" and env["TRITON_CACHE_DIR"] == str(tmp_path / "cache")
    assert "TRITON_INTERPRET" not in runner.child_env(str(tmp_path), "cuda")


def test_capture_keeps_head_and_tail_only():
    from kernels.judge import children

    capture = children.Capture()
    for i in range(10000):
        capture.add(f"line {i}\n".encode())
    text = capture.text()
    assert text.startswith("line 0\n") and text.endswith("line 9999\n")
    assert "bytes of output dropped" in text
    assert len(text) < children.HEAD_BYTES + children.TAIL_BYTES + 100


def test_the_summary_counts_timed_shapes_keeps_significant_figures_and_says_cpu_timings_are_noisy():
    from kernels.judge.report import JudgeReport

    timed = {"shape": "T=64", "speedup": 0.00192,
             "timing": {"candidate": {"median_ms": 10.0}, "baseline": {"median_ms": 0.0192}}}
    report = JudgeReport(status="ok", shapes=[timed, {**timed, "shape": "T=128"}, {"shape": "T=4096"}],
                         speedup=0.00192, timing_kind="interpreter", baseline="eager")
    text = report.summary()
    assert "speedup vs eager: 0.00192x geomean over 2 timed shapes (1 more checked, not timed)" in text
    assert "CPU interpreter timings are noisy" in text
    assert "0.00192x vs eager" in text and "0.00x" not in text
