"""The worked example's regimes catch what its default draw lets through: its seed kernel with
``eps`` dropped passes the default inputs and fails the ``zero-rows`` regime (0 / 0)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.problems.installed import EXAMPLE_ROOT, REPO, pythonpath

KERNEL = EXAMPLE_ROOT / "marathon_rmsnorm" / "kernel.py"


def _judge(tmp_path, source: str) -> dict:
    candidate = tmp_path / "candidate.py"
    candidate.write_text(source)
    env = dict(os.environ, PYTHONPATH=pythonpath(tmp_path / "site"))
    result = subprocess.run([sys.executable, "-m", "marathon.cli", "judge", str(candidate), "--problem",
                             "marathon_rmsnorm.definition:PROBLEM", "--device", "cpu", "--quiet", "--json"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def test_a_kernel_without_eps_fails_the_zero_rows_regime(tmp_path):
    source = KERNEL.read_text()
    assert "EPS = 1e-6" in source
    report = _judge(tmp_path, source.replace("EPS = 1e-6", "EPS = 0.0"))
    assert report["status"] == "incorrect"
    # Zero rows are in the zero-rows regime and, as odd rows, in every other draw too: whichever
    # call the plan checks first catches it.
    assert "NaN/Inf" in report["message"], report["message"]
