"""``marathon export RUN`` round-trips: a run's stored best (a real CPU judgement of a real
kernel) becomes a package that pip installs into a fresh virtual environment, imports without
Marathon, and whose reference test passes under the Triton interpreter; an unaccepted best is
refused."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import sysconfig

import pytest

from kernels.judge import judge
from store import repository, run_progress
from store.artifacts import put_text
from tests.problems.scaled import DEFAULT, render
from workflows.types import Budget, Goal, ProposerConfig

PROBLEM = "tests.problems.scaled:PROBLEM"


def _seed(api, run_id: str, source: str, report: dict) -> None:
    with api.db() as session:
        repository.create_run(session, run_id=run_id, problem=PROBLEM, goal=Goal(target=2.0),
                              budget=Budget(iterations=3), proposer=ProposerConfig(), candidates_per_iteration=1,
                              workflow_id=run_id)
        attempt, _ = repository.record_attempt(
            session, run_id=run_id, iteration=2, index=0, strategy="search", knobs=dict(DEFAULT),
            source_sha=put_text(session, source), status=report["status"], message="",
            speedup=report.get("speedup"), roofline=None, timing_kind=report["timing_kind"],
            report_sha=put_text(session, json.dumps(report)), is_best=True, gpu_seconds=1.0)
        run_progress.record_progress(session, run_id, status="completed", iteration=3,
                                     best_attempt_id=attempt.id, best_speedup=report.get("speedup"))


async def _cli(api, tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, MARATHON_API_TOKEN=api.token, PYTHONPATH=os.getcwd())
    command = [sys.executable, "-m", "marathon.cli", *args, "--api-url", api.base_url, "--home", str(tmp_path)]
    # The API serves from this event loop: wait for the command in a thread.
    return await asyncio.to_thread(subprocess.run, command, env=env, cwd=os.getcwd(), capture_output=True,
                                   text=True, timeout=300)


def _fresh_venv(where) -> str:
    """A venv without pip of its own (the shared one's pip installs into it), seeing the shared
    venv's packages (torch, triton, setuptools) through a .pth file, and not Marathon's checkout."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(where)], check=True,
                   timeout=120)
    python = str(where / "bin" / "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(purelib, "shared_venv.pth"), "w") as pth:
        pth.write(sysconfig.get_paths()["purelib"] + "\n")
    return python


async def test_an_exported_best_installs_imports_and_passes_its_test_in_a_fresh_venv(api, tmp_path):
    if not api.settings.resolved_database_url.startswith("sqlite"):
        pytest.skip("export reads the run through the API: one store is enough for this minute-long round trip")
    source = render(dict(DEFAULT))
    report = await asyncio.to_thread(judge, source, PROBLEM, device="cpu", seeds=2)
    assert report.status == "ok", report.message
    _seed(api, "scaled-export1", source, report.to_dict())

    out = tmp_path / "exported"
    result = await _cli(api, tmp_path, "export", "scaled-export1", "-o", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "package marathon_scaled, function scaled(x, scale)" in result.stdout
    package = out / "marathon_scaled"
    assert (package / "kernel.py").read_text() == source
    provenance = json.loads((package / "provenance.json").read_text())
    assert provenance["run_id"] == "scaled-export1" and provenance["attempt"]["iteration"] == 2
    assert provenance["candidate_sha256"] == report.candidate_sha256 and provenance["exported_by_commit"]
    measured = json.loads((package / "measured.json").read_text())
    assert measured["baseline"] == "eager" and measured["timing_kind"] == "interpreter"
    assert [row["shape"] for row in measured["shapes"]] == ["N=100", "N=37"]
    assert all(row["speedup"] > 0 for row in measured["shapes"])
    readme = (out / "README.md").read_text()
    assert "against `eager`" in readme and "not GPU performance" in readme and "| N=100 |" in readme

    python = await asyncio.to_thread(_fresh_venv, tmp_path / "venv")
    installed = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps",
                         "--no-build-isolation", "--quiet", str(out)], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"TRITON_INTERPRET": "1"}
    away = tmp_path / "elsewhere"
    away.mkdir()
    tested = await asyncio.to_thread(
        subprocess.run, [python, "-c", "import marathon_scaled, sys; assert 'kernels' not in sys.modules; "
                         "print(marathon_scaled.__file__, marathon_scaled.MEASURED['baseline']); "
                         "import runpy; runpy.run_module('marathon_scaled.test_kernel', run_name='__main__')"],
        cwd=away, env=env, capture_output=True, text=True, timeout=300)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert str(tmp_path / "venv") in tested.stdout and " eager" in tested.stdout
    assert "marathon_scaled: the kernel matches its reference on cpu" in tested.stdout


async def test_a_best_the_judge_did_not_accept_is_not_exported(api, tmp_path):
    _seed(api, "scaled-export2", render(dict(DEFAULT)), {"status": "incorrect", "timing_kind": "interpreter"})
    result = await _cli(api, tmp_path, "export", "scaled-export2", "-o", str(tmp_path / "out"))
    assert result.returncode == 1
    assert "was not accepted by the judge (status 'incorrect'): nothing to export" in result.stderr
    assert not (tmp_path / "out").exists()
