"""Ctrl-C stops every process ``marathon up`` started, and a second ``marathon up`` on the same
home finishes the run that was in flight: the dev server's SQLite kept the workflow, the
workers pick it up, and no iteration is recorded twice."""

import signal

from marathon.cli import main
from tests.cli.stack import descendants, listening_addresses, new_stack, still_alive, wait_for

ITERATIONS = 2


def attempts_of(client, run_id):
    return client.get(f"/runs/{run_id}/attempts", params={"limit": 1000}).json()["data"]


def test_ctrl_c_stops_everything_and_the_next_up_resumes_the_run(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MARATHON_API_TOKEN", raising=False)
    stack = new_stack(tmp_path / "home")
    stack.start()
    try:
        token = stack.token
        with stack.client() as client:
            created = client.post(
                "/runs",
                json={
                    "problem": "kda",
                    "budget": {"iterations": ITERATIONS},
                    "proposer": {"kind": "search", "seed": 1},
                    "candidates_per_iteration": 1,
                },
            )
            assert created.status_code == 201, created.text
            run_id = created.json()["id"]
            wait_for(lambda: len(attempts_of(client, run_id)) >= 1, 300, "the first recorded attempt")
            in_flight = client.get(f"/runs/{run_id}").json()
            assert in_flight["status"] == "running" and in_flight["iteration"] < ITERATIONS, in_flight
        processes = descendants(stack.process.pid)
        assert len(processes) >= 4
    finally:
        code = stack.stop(signal.SIGINT)
    assert code == 0
    assert still_alive(processes) == []
    for port in (stack.api_port, stack.temporal_port, stack.ui_port):
        assert listening_addresses(port) == []
    assert "(shown once" in stack.output()

    stack.start()
    try:
        assert stack.token == token
        assert token not in stack.output()
        assert "API token    in " in stack.output()
        with stack.client() as client:
            finished = wait_for(
                lambda: (run := client.get(f"/runs/{run_id}").json())["status"] != "running" and run,
                600, "the resumed run to finish", interval=1.0,
            )
            assert finished["status"] == "completed", finished
            attempts = attempts_of(client, run_id)
        capsys.readouterr()
        best_file = tmp_path / "best.py"
        assert main(["best", run_id, "-o", str(best_file), "--home", str(stack.home)]) == 0
        out = capsys.readouterr().out
    finally:
        stack.stop(signal.SIGINT)
    keys = [(attempt["iteration"], attempt["index"]) for attempt in attempts]
    assert sorted(keys) == [(iteration, 0) for iteration in range(1, ITERATIONS + 1)]
    assert finished["iteration"] == ITERATIONS
    assert finished["best_attempt_id"] is not None
    best = next(attempt for attempt in attempts if attempt["id"] == finished["best_attempt_id"])
    assert best["status"] == "ok" and best["timing_kind"] == "interpreter"
    assert f"judge status ok, speedup {best['speedup']:.3g}x (interpreter timing: CPU, noisy)" in out
    assert "@triton.jit" in best_file.read_text()
