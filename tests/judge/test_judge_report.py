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


def _timed(cand_ms, base_ms, cand_wall=None, base_wall=None):
    def summary(ms, wall):
        return {"median_ms": ms, "min_ms": ms, "spread": 0.01, "median_wall_ms": wall or ms * 1.05, "reps": 30}

    return {"candidate": summary(cand_ms, cand_wall), "baseline": summary(base_ms, base_wall)}


def _score(device, timing, shape=(4, 1024, 64)):
    spec = get_problem("tests.judge.toy:PROBLEM")
    config = {"verify": [list(shape)], "bench": [list(shape)], "dtype": "float32"}
    data = {"final": {"timings": [{"shape": list(shape), **timing}], "baseline": "torch", "resources": {}},
            "verdict1": {"errors": {"v0/seed0": 1e-7}, "tolerance": 1e-5}}

    def finish(status, message, **fields):
        return JudgeReport(status=status, message=message, **fields)

    return runner._scored(spec, config, data, device, finish, {})


def test_gpu_scoring_gives_speedup_roofline_and_floor():
    spec = get_problem("tests.judge.toy:PROBLEM")
    floor = floor_ms(spec, (4, 1024, 64), "float32")
    report = _score("cuda", _timed(cand_ms=10 * floor, base_ms=20 * floor))
    assert report.status == "ok", report.message
    assert report.speedup == pytest.approx(2.0)
    assert report.roofline == pytest.approx(0.1)
    assert report.shapes[0]["floor_ms"] == pytest.approx(floor)


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


def test_interpreter_scoring_has_speedup_but_no_roofline():
    report = _score("cpu", _timed(cand_ms=30.0, base_ms=0.3))
    assert report.status == "ok"
    assert report.speedup == pytest.approx(0.01)
    assert report.roofline is None and "floor_ms" not in report.shapes[0]


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
    capture = runner._Capture()
    for i in range(10000):
        capture.add(f"line {i}\n".encode())
    text = capture.text()
    assert text.startswith("line 0\n") and text.endswith("line 9999\n")
    assert "bytes of output dropped" in text
    assert len(text) < runner.HEAD_BYTES + runner.TAIL_BYTES + 100
