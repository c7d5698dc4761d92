"""``marathon run --continue RUN_ID`` and ``marathon run PROBLEM --from RUN_ID`` against a live
``marathon up``: what they send, print and refuse."""

import json

import pytest

from tests.cli.test_client_commands import cli, start_run


@pytest.fixture
def home(live_stack):
    return ["--home", str(live_stack.home)]


@pytest.fixture(autouse=True)
def no_token_in_env(monkeypatch):
    monkeypatch.delenv("MARATHON_API_TOKEN", raising=False)


@pytest.mark.parametrize(
    "argv, message",
    [
        (("run",), "which problem? give it as `marathon run PROBLEM`"),
        (("run", "kda", "--continue", "kda-1"), "--continue takes the problem from run kda-1: leave out 'kda'"),
        (("run", "--continue", "kda-1", "--from", "kda-2"), "--continue and --from do not go together"),
        (("run", "--continue", "kda-1", "--proposer", "llm", "--seed", "3"), "kda-1's --proposer, --seed"),
    ],
    ids=["no-problem", "continue-with-problem", "continue-and-from", "continue-with-proposer"],
)
def test_flag_combinations_that_cannot_work_exit_2(capsys, argv, message):
    code, out, err = cli(capsys, *argv)
    assert (code, out) == (2, "")
    assert "usage: marathon run" in err and message in err


def show_json(capsys, home, run_id):
    code, out, err = cli(capsys, "show", run_id, "--json", *home)
    assert code == 0, err
    return json.loads(out)


def test_fork_a_live_run_then_continue_it_once_stopped(capsys, home):
    parent_id, _ = start_run(capsys, home)

    code, out, err = cli(capsys, "run", "--continue", parent_id, "--iterations", "2", *home)
    assert (code, out) == (1, "")
    assert f"failed (409): run {parent_id} is still running" in err and f"--from {parent_id}" in err

    code, out, err = cli(capsys, "run", "kda", "--from", parent_id, "--iterations", "3", "--goal", "4", *home)
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("started run ") and first.endswith(f" (kda, forked from {parent_id})")
    fork_id = first.split()[2]
    fork = show_json(capsys, home, fork_id)
    assert (fork["from_run"], fork["from_kind"]) == (parent_id, "fork")
    assert fork["budget"]["iterations"] == 3 and fork["goal"]["target"] == 4.0
    code, out, _ = cli(capsys, "show", fork_id, *home)
    assert f"  forked from  {parent_id}" in out.splitlines()

    code, _, err = cli(capsys, "run", "mla-decode", "--from", parent_id, *home)
    assert code == 1 and "failed (422)" in err and f"run {parent_id} optimizes problem 'kda', not 'mla-decode'" in err
    assert f"from_run: run {parent_id}" in err and "from_run: from_run:" not in err  # the field named once

    cli(capsys, "stop", parent_id, *home)
    code, _, _ = cli(capsys, "watch", parent_id, "--interval", "0.5", *home)
    assert code == 0
    parent = show_json(capsys, home, parent_id)
    code, out, err = cli(capsys, "run", "--continue", parent_id, "--iterations", "2", "--goal", "3", *home)
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("started run ") and first.endswith(f" (continues {parent_id})")
    continued_id = first.split()[2]
    continued = show_json(capsys, home, continued_id)
    assert (continued["from_run"], continued["from_kind"]) == (parent_id, "continue")
    assert continued["budget"]["iterations"] == parent["iteration"] + 2 and continued["goal"]["target"] == 3.0
    assert continued["candidates_per_iteration"] == parent["candidates_per_iteration"] == 1

    code, _, err = cli(capsys, "run", "--continue", "kda-no-such-run", *home)
    assert code == 1 and "failed (404): run kda-no-such-run not found" in err
    for run_id in (fork_id, continued_id):
        cli(capsys, "stop", run_id, *home)
