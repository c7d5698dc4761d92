"""``marathon problem check``: each clause of the contract, broken on purpose, is caught with a
message that says what is wrong; a sound problem passes every check (its seed kernel judged for
real on the CPU), and the command's exit code says which."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kernels.problem_check import check_problem
from tests.problems.installed import REPO, pythonpath


def failures(name: str, run_judge: bool = False) -> dict[str, str]:
    return {f.check: f.message for f in check_problem(name, run_judge=run_judge, build_bench=False) if not f.ok}


BROKEN = {
    "NONDETERMINISTIC": ("inputs", "gives different tensors for the same seed 0: draw from a torch.Generator"),
    "SEED_IGNORED": ("inputs", "gives the same tensors for seeds 0 and 1"),
    "WRONG_INPUT_NAMES": ("inputs", "gives ['y', 'scale']; input_names says ['x', 'scale']"),
    "NO_CPU_TOLERANCE": ("tolerance", "no tolerance for cpu_dtype 'float32'"),
    "NEGATIVE_TOLERANCE": ("tolerance", "tolerance['float32'] = -1e-05 must be a relative error between 0 and 1"),
    "NO_CPU_SHAPES": ("shapes", "shape set 'cpu' is missing or empty"),
    "BAD_SHAPE": ("shapes", "verify shape (100, 3) must have 1 positive integers (N)"),
    "ZERO_FLOPS": ("roofline", "flops(100,) = 0.0; it must be positive and finite"),
    "DISAGREEING_CHECK": ("reference", "reference_check (tests.problems.broken:reference_off_by_a_bit) differs from "
                          "the reference at N=100: relative RMS error 0.001 > 1e-06"),
    "WRONG_OUTPUT_SHAPE": ("reference", "reference at N=100 gives (99,); output() says (100,)"),
    "WRONG_BASELINE": ("baseline", "baseline 'eager' differs from the reference at N=100"),
    "BAD_NAME": ("name", "name 'Scaled Add' must be lower case letters, digits and '-'"),
    "DEFAULT_OUTSIDE_SPACE": ("space", "DEFAULT['block'] = 48 is not one of SPACE['block'] = [16, 32, 64]"),
}


@pytest.mark.parametrize("variant", sorted(BROKEN))
def test_each_broken_clause_is_named(variant):
    check, message = BROKEN[variant]
    failed = failures(f"tests.problems.broken:{variant}")
    assert check in failed, failed
    assert message in failed[check]
    # Only that clause, and what depends on it, fails.
    independent = {"name", "shapes", "tolerance", "space"} - {check}
    assert not independent & set(failed), failed


def test_what_is_not_a_problem_says_so():
    assert failures("tests.problems.broken:NOT_A_PROBLEM") == {
        "load": "ValueError: 'tests.problems.broken:NOT_A_PROBLEM' is not a kernels.problem.Problem (it is a dict)"
    }
    assert "unknown problem 'gemm'; known problems: kda, kda-general, kda-varlen, mla-decode, mla-decode-paged" in failures("gemm")["load"]


def test_a_dependent_check_waits_for_what_it_needs():
    failed = failures("tests.problems.broken:BAD_SHAPE")
    assert failed["inputs"] == "not run: fix shapes first"
    assert failed["baseline"] == "not run: fix shapes, inputs, reference first"


def _check(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "marathon.cli", "problem", "check", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def test_a_seed_kernel_the_judge_rejects_fails_the_check_with_the_judges_reason():
    result = _check("tests.problems.scaled:WRONG_SEED")
    assert result.returncode == 1, result.stdout + result.stderr
    assert ("FAIL  judge: the seed kernel (render(DEFAULT)) does not pass the judge on the CPU: incorrect: "
            "relative RMS error") in result.stdout
    assert "1 check(s) failed" in result.stdout


def test_a_sound_problem_passes_every_check_and_exits_zero():
    result = _check("tests.problems.scaled:PROBLEM", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert [f["check"] for f in report["findings"]] == [
        "load", "name", "shapes", "tolerance", "roofline", "inputs", "reference", "baseline", "space", "bench build",
        "regimes", "judge"]


def test_the_example_problem_passes_by_its_entry_point_name(tmp_path):
    env = dict(os.environ, PYTHONPATH=pythonpath(tmp_path))
    result = subprocess.run([sys.executable, "-m", "marathon.cli", "problem", "check", "rmsnorm-residual"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok    judge: the seed kernel passes the judge on the CPU" in result.stdout
    assert "ok    reference: as the contract asks" in result.stdout


def test_a_broken_problem_exits_one_naming_the_clause():
    result = _check("tests.problems.broken:SEED_IGNORED", "--no-judge")
    assert result.returncode == 1
    expected = "FAIL  inputs: make_inputs(100,) (regime 'default') gives the same tensors for seeds 0 and 1"
    assert expected in result.stdout
    assert "FAIL  judge" not in result.stdout
