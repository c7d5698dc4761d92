"""The client commands against a live ``marathon up``: what they print and how they exit."""

import json
import subprocess
import sys
import time

import httpx
import pytest

from marathon.cli import main
from tests.cli.stack import REPO, free_ports, wait_for


def cli(capsys, *argv):
    """Run ``marathon ARGV`` in-process; returns (exit code, stdout, stderr)."""
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def home(live_stack):
    return ["--home", str(live_stack.home)]


@pytest.fixture(autouse=True)
def no_token_in_env(monkeypatch):
    monkeypatch.delenv("MARATHON_API_TOKEN", raising=False)


def start_run(capsys, home, *extra):
    code, out, err = cli(capsys, "run", "kda", "--proposer", "search", "--iterations", "50", "--candidates", "1", *home, *extra)
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("started run ") and first.endswith(" (kda)")
    return first.split()[2], out


def test_run_prints_where_to_watch(capsys, home, live_stack):
    run_id, out = start_run(capsys, home)
    assert f"run page     {live_stack.api_url}/runs/{run_id}/page" in out
    assert f"Temporal UI  http://127.0.0.1:{live_stack.ui_port}/namespaces/default/workflows/{run_id}" in out
    assert f"follow it with: marathon watch {run_id}" in out
    # The Temporal UI's own server answers for the run (what the UI page renders).
    shown = httpx.get(f"http://127.0.0.1:{live_stack.ui_port}/api/v1/namespaces/default/workflows/{run_id}", timeout=10)
    assert shown.status_code == 200
    assert shown.json()["workflowExecutionInfo"]["type"]["name"] == "OptimizeKernelWorkflow"
    cli(capsys, "stop", run_id, *home)


def test_runs_and_show_list_the_run(capsys, home):
    run_id, _ = start_run(capsys, home, "--goal", "3.5")
    code, out, _ = cli(capsys, "runs", "--problem", "kda", *home)
    assert code == 0
    assert out.splitlines()[0].split() == ["ID", "PROBLEM", "STATUS", "PHASE", "ITER", "BEST", "GOAL", "ELAPSED",
                                           "CREATED"]
    row = next(line for line in out.splitlines() if line.startswith(run_id))
    assert row.split()[1:3] == ["kda", "running"] and "3.5x" in row

    code, out, _ = cli(capsys, "show", run_id, *home)
    assert code == 0
    assert out.splitlines()[0] == f"run {run_id}  kda  running"
    assert "  goal         3.5x" in out

    code, out, _ = cli(capsys, "show", run_id, "--json", *home)
    assert code == 0
    shown = json.loads(out)
    assert shown["id"] == run_id and shown["goal"]["target"] == 3.5 and shown["budget"]["iterations"] == 50
    cli(capsys, "stop", run_id, *home)


def test_pause_resume_stop_and_watch_to_the_end(capsys, home, live_stack):
    run_id, _ = start_run(capsys, home)
    code, out, _ = cli(capsys, "pause", run_id, *home)
    assert (code, out) == (0, f"run {run_id} asked to pause\n")
    with live_stack.client() as client:
        wait_for(lambda: client.get(f"/runs/{run_id}").json()["status"] == "paused", 300, "the run to pause")
    code, out, _ = cli(capsys, "resume", run_id, *home)
    assert (code, out) == (0, f"run {run_id} asked to resume\n")
    # Paused again at once, the run stops without finishing another iteration.
    cli(capsys, "pause", run_id, *home)
    code, out, _ = cli(capsys, "stop", run_id, *home)
    assert (code, out) == (0, f"run {run_id} asked to stop: it shows 'stopping' until its current step ends, then 'stopped'\n")

    code, out, _ = cli(capsys, "watch", run_id, "--interval", "0.5", *home)
    assert code == 0
    assert out.splitlines()[-1].startswith(f"run {run_id} stopped")
    assert "goal 2x" in out.splitlines()[0]

    code, _, err = cli(capsys, "pause", run_id, *home)
    assert code == 1
    assert f"failed (409): run {run_id} is stopped; it can no longer be paused" in err


def test_run_with_hours_and_wait_returns_when_the_budget_ends_it(capsys, home, live_stack):
    hours = 0.002  # 7.2 s: the check before the second iteration finds the hours spent
    started = time.monotonic()
    code, out, err = cli(
        capsys, "run", "kda", "--proposer", "search", "--iterations", "1000", "--candidates", "1",
        "--goal", "300", "--hours", str(hours), "--wait", *home,
    )
    elapsed = time.monotonic() - started
    lines = out.splitlines()
    assert lines[0].startswith("started run ") and lines[0].endswith(" (kda)"), out
    run_id = lines[0].split()[2]
    assert (code, lines[-1]) == (0, f"run {run_id} completed: its time budget was spent (budget_hours)"), f"{out}\n{err}"
    # Only the hours budget can have ended it, and not before the hours had passed.
    assert elapsed >= hours * 3600, f"--wait returned after {elapsed:.1f} s, before the {hours * 3600:g} s budget"
    assert "follow it with" not in out
    # In between, the progress lines a pipe gets (one per change), ending on the finished state.
    progress = [line for line in lines[1:-1] if "  goal 300x  " in line]
    assert progress and progress[0].startswith("[") and "  completed" in progress[-1], out
    assert all("/1000  best " in line for line in progress), out

    with live_stack.client() as client:
        run = client.get(f"/runs/{run_id}").json()
    assert run["budget"]["hours"] == hours and run["budget"]["iterations"] == 1000
    assert (run["status"], run["stop_reason"]) == ("completed", "budget_hours")
    assert run["budget_used"]["hours"] >= hours and run["iteration"] >= 1


def test_a_run_file_starts_the_run_it_describes_with_the_flags_over_it(capsys, home, live_stack, tmp_path):
    run_file = tmp_path / "run.toml"
    run_file.write_text(
        'problem = "kda"\ncandidates_per_iteration = 1\n\n[goal]\nspeedup = 3.5\nintent = "from a run file"\n\n'
        "[budget]\niterations = 40\nhours = 2\nplateau_iterations = 30\n\n"
        '[proposer]\nkind = "search"\nseed = 11\n'
    )
    code, out, err = cli(capsys, "run", "-f", str(run_file), "--iterations", "50", *home)
    assert code == 0, err
    assert out.splitlines()[0].startswith("started run ") and out.splitlines()[0].endswith(" (kda)")
    run_id = out.splitlines()[0].split()[2]
    with live_stack.client() as client:
        run = client.get(f"/runs/{run_id}").json()
    goal = run["goal"]
    assert (goal["objective"], goal["target"], goal["intent"]) == ("speedup", 3.5, "from a run file")
    assert (run["budget"]["iterations"], run["budget"]["hours"], run["budget"]["plateau_iterations"]) == (50, 2, 30)
    assert (run["proposer"]["kind"], run["proposer"]["seed"], run["candidates_per_iteration"]) == ("search", 11, 1)
    cli(capsys, "stop", run_id, *home)

    # The file checks shapes and types; the API checks the values and says which one is wrong.
    run_file.write_text('problem = "kda"\n[budget]\niterations = 0\n')
    code, out, err = cli(capsys, "run", "-f", str(run_file), *home)
    assert (code, out) == (1, "")
    assert "POST /runs failed (422)" in err and "budget" in err and "iterations" in err, err


def test_unknown_run_and_unknown_problem_show_the_server_message(capsys, home):
    code, out, err = cli(capsys, "show", "no-such-run", *home)
    assert (code, out) == (1, "")
    assert err == "marathon: no run no-such-run; see `marathon runs`\n"

    code, _, err = cli(capsys, "run", "no-such-problem", *home)
    assert code == 1
    assert "POST /runs failed (422)" in err and "kda" in err and "mla-decode" in err

    code, _, err = cli(capsys, "best", "no-such-run", "-o", "/tmp/never-written.py", *home)
    assert code == 1 and "no run no-such-run; see `marathon runs`" in err


def test_a_mistyped_run_id_gets_a_did_you_mean(capsys, home):
    run_id, _ = start_run(capsys, home)
    prefix = run_id[:-4]
    for command in (("show", prefix), ("watch", prefix), ("pause", prefix), ("hint", prefix, "BT=64")):
        code, out, err = cli(capsys, *command, *home)
        assert (code, out) == (1, ""), command
        assert err.startswith(f"marathon: no run {prefix}; see `marathon runs` (did you mean "), err
        assert run_id in err
    cli(capsys, "stop", run_id, *home)


def test_best_without_a_best_kernel_yet(capsys, home, tmp_path):
    run_id, _ = start_run(capsys, home)
    cli(capsys, "stop", run_id, *home)
    target = tmp_path / "best.py"
    code, _, err = cli(capsys, "best", run_id, "-o", str(target), *home)
    assert code == 1
    assert f"failed (404): run {run_id} has no best kernel yet" in err
    assert not target.exists()


def test_refused_token_says_how_to_fix_it(capsys, home, live_stack, monkeypatch):
    monkeypatch.setenv("MARATHON_API_TOKEN", "mt_wrong")
    code, _, err = cli(capsys, "runs", *home)
    assert code == 1
    assert f"the API at {live_stack.api_url} refused the token (401)" in err
    assert f"{live_stack.home}/api-token" in err and "MARATHON_API_TOKEN" in err


def test_missing_token_says_where_it_should_be(capsys, live_stack, tmp_path):
    code, _, err = cli(capsys, "runs", "--home", str(tmp_path), "--api-url", live_stack.api_url)
    assert code == 1
    assert f"no API token: `marathon up` writes one to {tmp_path}/api-token" in err


def test_api_down_is_named_with_its_url():
    (port,) = free_ports(1)
    result = subprocess.run(
        [sys.executable, "-m", "marathon.cli", "runs", "--api-url", f"http://127.0.0.1:{port}"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith(
        f"marathon: cannot reach the Marathon API at http://127.0.0.1:{port}: is `marathon up` running?"
    )


@pytest.mark.parametrize(
    "argv",
    [("run",), ("run", "kda", "--iterations", "many"), ("run", "kda", "--proposer", "oracle"), ("best", "abc"), ("watch",)],
    ids=["no-problem", "bad-int", "bad-choice", "best-without-output", "watch-without-id"],
)
def test_usage_errors_exit_2(capsys, argv):
    code, _, err = cli(capsys, *argv)
    assert code == 2
    assert "usage: marathon" in err


def test_an_llm_run_without_an_endpoint_is_refused_with_what_to_set(capsys, home, live_stack):
    if live_stack.env().get("MARATHON_LLM_BASE_URL"):
        pytest.skip("this stack's CPU worker has an LLM endpoint")
    code, out, err = cli(capsys, "run", "kda", "--proposer", "llm", *home)
    assert (code, out) == (1, "")
    assert "POST /runs failed (409)" in err and "no endpoint" in err
    for name in ("MARATHON_LLM_BASE_URL", "MARATHON_LLM_MODEL"):
        assert name in err
    code, out, _ = cli(capsys, "runs", *home)
    assert "llm" not in out  # nothing was started
