"""``marathon judge``: exit codes and output."""

from __future__ import annotations

import json

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
    assert "unknown problem 'nope'; known problems: kda, mla-decode" in capsys.readouterr().err
    assert main(["judge", str(CANDIDATES / "honest_cumsum.py"), "--problem", TOY, "--seeds", "0"]) == 2
