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
    assert "| problem | run | status | speedup | GPU busy | total s | startup | load |" in printed.out
    assert "1 (empty cache)" in printed.out and "concurrent 2/2" in printed.out
    data = json.loads(out.read_text())
    assert data["device"] == "cpu"
    assert [j["status"] for j in data["judgements"]] == ["ok", "ok", "ok"]
    for judgement in data["judgements"]:
        assert {"startup", "load", "verify", "timing"} <= set(judgement["phases"])
        assert sum(judgement["phases"].values()) <= judgement["seconds"] + 0.05
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


def test_bench_judge_refuses_bad_counts(capsys):
    assert main(["bench", "judge", "--runs", "0"]) == 2
    assert "--runs must be >= 1" in capsys.readouterr().err
