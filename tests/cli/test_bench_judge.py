"""`marathon bench judge`: whole judgements timed phase by phase, alone and several at once."""

from __future__ import annotations

import json

from marathon.cli import main
from tests.judge.corpus import TOY


def test_bench_judge_prints_phases_and_concurrency(tmp_path, capsys):
    out = tmp_path / "bench.json"
    code = main(["bench", "judge", "--problem", TOY, "--runs", "1", "--concurrent", "2", "--device", "cpu",
                 "--fresh-cache", "--json", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "| problem | run | status | speedup | GPU busy | total s | compile | startup | load |" in printed.out
    assert "1 (empty cache)" in printed.out and "concurrent 2/2" in printed.out
    data = json.loads(out.read_text())
    assert data["device"] == "cpu"
    assert [j["status"] for j in data["judgements"]] == ["ok", "ok", "ok"]
    for judgement in data["judgements"]:
        assert {"startup", "load", "verify", "timing"} <= set(judgement["phases"])
        assert sum(judgement["phases"].values()) <= judgement["seconds"] + 0.05
        # Compile time is told apart from the checks it happens in (the first call at each shape).
        assert judgement["compile_s"] is not None and 0 <= judgement["compile_s"] <= judgement["phases"]["verify"]
        # Per timed shape: the figures that tell a judgement's noise from a real change.
        assert len(judgement["shapes"]) == 2  # the toy's CPU bench shapes
        for shape in judgement["shapes"]:
            assert shape["speedup"] > 0 and shape["candidate_ms"] > 0 and shape["baseline_ms"] > 0
            assert shape["reps"] >= 1 and shape["candidate_spread"] >= 0
    # Kept referees, as a worker keeps them: the later judgements found theirs warm.
    assert not data["judgements"][0]["referee_reused"]
    assert any(j["referee_reused"] for j in data["judgements"][1:])
    (together,) = data["concurrency"]
    assert together["judgements"] == 2 and together["statuses"] == ["ok", "ok"]
    assert together["sequential_s"] == round(2 * data["judgements"][0]["seconds"], 2)


def test_compile_time_is_each_checked_shapes_first_call_beyond_its_later_ones():
    from marathon.judge_bench import PhaseClock, first_call_excess

    def call(number: int, shape: str) -> str:
        return f"checking correctness, call {number}/5 ({shape})"

    marks = [(0.0, "loading the candidate"), (1.0, call(1, "T=64")), (4.0, call(2, "T=64")), (4.5, call(3, "T=64")),
             (5.1, call(4, "T=100")), (7.1, call(5, "T=100")), (7.3, "warming up, shape 1/1 (T=128)"), (9.0, "")]
    # T=64: 3.0 s first against a 0.55 s median later; T=100: 2.0 s against 0.2 s.
    assert first_call_excess(marks) == round((3.0 - 0.55) + (2.0 - 0.2), 3)
    assert first_call_excess(marks[:3]) is None  # no shape checked twice: nothing to tell it from
    clock = PhaseClock()
    for label in ("a", "a", "b", "b", "a"):
        clock(label)
    assert [label for _, label in clock.marks] == ["a", "b", "a"]  # one mark per change of label


def test_bench_judge_refuses_bad_counts(capsys):
    assert main(["bench", "judge", "--runs", "0"]) == 2
    assert "--runs must be >= 1" in capsys.readouterr().err
