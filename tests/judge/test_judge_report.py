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


def _timed(cand_ms, base_ms, cand_cpu=None, base_cpu=None, calls=5):
    """Two batches per provider as the caller records them: the process's own account, the
    caller's clock around the batch and, on the CPU, the CPU time of the process tree."""
    def batches(ms, cpu):
        return [{"call_ms": [ms] * calls, "batch_ms": ms * calls * 1.05, "outside_ms": ms * calls * 1.1,
                 "cpu_ms": None if cpu is None else cpu * calls, "calls": calls}] * 2

    return {"candidate": batches(cand_ms, cand_cpu), "baseline": batches(base_ms, base_cpu)}


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
    assert timed["timing"]["candidate"]["outside_ms_per_call"] == pytest.approx(10 * floor * 1.1)


def test_time_below_the_physical_floor_is_suspicious():
    spec = get_problem("tests.judge.toy:PROBLEM")
    floor = floor_ms(spec, (4, 1024, 64), "float32")
    report = _score("cuda", _timed(cand_ms=0.2 * floor, base_ms=20 * floor))
    assert report.status == "suspicious"
    assert "below half the physical floor" in report.message


def test_on_a_gpu_graph_replay_decides_and_the_host_inclusive_ratio_stays_beside():
    spec = get_problem("tests.judge.toy:PROBLEM")
    floor = floor_ms(spec, (4, 1024, 64), "float32")
    # Host-inclusive: the candidate's cheap launch path wins 2x; GPU time under graph replay: 1.25x.
    timing = {**_timed(cand_ms=10 * floor, base_ms=20 * floor),
              "graph": {"candidate": {"median_ms": 8 * floor}, "baseline": {"median_ms": 10 * floor}}}
    report = _score("cuda", timing)
    assert report.status == "ok", report.message
    timed = next(s for s in report.shapes if "timing" in s)
    assert report.speedup == pytest.approx(1.25) and timed["speedup"] == pytest.approx(1.25)
    assert timed["host_speedup"] == pytest.approx(2.0) and timed["clock"] == "CUDA-graph replay (GPU time)"
    assert report.roofline == pytest.approx(1 / 8)  # from the deciding (graph) time
    assert "GPU time under CUDA-graph replay" in report.message
    # Without a graph figure the per-call time decides and says so.
    plain = next(s for s in _score("cuda", _timed(cand_ms=10 * floor, base_ms=20 * floor)).shapes if "timing" in s)
    assert plain["speedup"] == pytest.approx(2.0) and "host launch path included" in plain["clock"]


def test_a_host_inclusive_problem_keeps_the_per_call_time_deciding_and_graph_times_only_its_listed_shapes():
    import dataclasses

    from kernels.judge import plan as planning, scoring

    spec = get_problem("tests.judge.toy:PROBLEM")
    assert planning.graph_timed(spec) == tuple(tuple(s) for s in spec.shape_set("bench"))
    host = dataclasses.replace(spec, extra={"host_inclusive": True, "launch_bound_shapes": [[4, 1024, 64]]})
    assert planning.graph_timed(host) == ((4, 1024, 64),)
    item = {"speedup": 2.0, "graph": {"candidate": {"median_ms": 8.0}, "baseline": {"median_ms": 10.0}}}
    scoring.graph_decides(host, item)
    assert item["speedup"] == 2.0 and "host_speedup" not in item and "contract" in item["clock"]
    assert item["graph"]["speedup"] == pytest.approx(1.25)


def _reply(call_ms, batch_ms):
    return {"call_ms": call_ms, "batch_ms": batch_ms}


def test_a_batch_must_agree_with_the_callers_clock():
    from kernels.judge import plan as planning, scoring
    from kernels.judge.children import Stop

    batch = planning.Batch(index=0, seeds=[1, 2], candidate_first=True)
    scoring.check_batch(_reply([5.0, 5.0], 11.0), batch, outside_ms=12.5, label="x")  # fits
    with pytest.raises(Stop, match="impossible times"):  # more than the caller's clock saw
        scoring.check_batch(_reply([5.0, 5.0], 11.0), batch, outside_ms=8.0, label="x")
    with pytest.raises(Stop, match="impossible times"):  # calls longer than their batch
        scoring.check_batch(_reply([9.0, 9.0], 11.0), batch, outside_ms=12.5, label="x")
    with pytest.raises(Stop, match="1 times for 2 calls"):
        scoring.check_batch(_reply([5.0], 11.0), batch, outside_ms=12.5, label="x")
    # A timer running at 1/8 (a patched perf_counter): the whole account shrinks 8x.
    with pytest.raises(Stop, match="agreement bound") as caught:
        scoring.check_batch(_reply([5.0 / 8, 5.0 / 8], 80.0 / 8), batch, outside_ms=82.0, label="x")
    assert caught.value.status == "suspicious"
    # The bound: at least outside / AGREEMENT - AGREEMENT_MS (cpu: 82 / 1.5 - 5 = 49.7 ms).
    scoring.check_batch(_reply([20.0, 20.0], 50.0), batch, outside_ms=82.0, label="x")
    scoring.check_batch(_reply([10.0, 10.0], 36.0), batch, outside_ms=82.0, label="x", device="cuda")


def test_interpreter_scoring_decides_on_the_cpu_time_of_the_process_tree():
    report = _score("cpu", _timed(cand_ms=30.0, base_ms=0.3, cand_cpu=20.0, base_cpu=0.4))
    assert report.speedup == pytest.approx(0.02)
    timed = next(s for s in report.shapes if "timing" in s)
    assert timed["timing"]["candidate"]["clock"] == "cpu time of the process tree"
    assert timed["outside_speedup"] == pytest.approx(0.01)


def test_interpreter_scoring_has_speedup_but_no_roofline():
    report = _score("cpu", _timed(cand_ms=30.0, base_ms=0.3))  # no cpuacct: the caller's wall clock
    assert report.status == "ok"
    assert report.speedup == pytest.approx(0.01)
    assert next(s for s in report.shapes if "timing" in s)["timing"]["candidate"]["clock"] == "the caller's wall clock"
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
