"""Crashes on the embedded stack itself: ``marathon up`` with a real kda run in flight, the
evaluation worker SIGKILLed while it judges, then the CPU worker SIGKILLed while the run goes on.
The supervisor restarts each child, Temporal hands the interrupted step to the new process, and
the run completes with every attempt recorded once and a best kernel the judge accepted."""

import os
import signal

from tests.cli.stack import new_stack, wait_for

ITERATIONS, CANDIDATES = 3, 2


def attempts_of(client, run_id):
    return client.get(f"/runs/{run_id}/attempts", params={"limit": 1000}).json()["data"]


def kill_child(stack, name: str) -> int:
    pid = stack.stack_file()["children"][name]
    os.kill(pid, signal.SIGKILL)

    def restarted():
        now = stack.stack_file()["children"][name]
        return now if now != pid and os.path.exists(f"/proc/{now}") else None

    wait_for(restarted, 60, f"{name} to be restarted")
    return pid


def test_killing_workers_of_marathon_up_mid_run_loses_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("MARATHON_API_TOKEN", raising=False)
    stack = new_stack(tmp_path / "home")
    stack.start()
    try:
        with stack.client() as client:
            created = client.post("/runs", json={
                "problem": "kda",
                "budget": {"iterations": ITERATIONS},
                "proposer": {"kind": "search", "seed": 3},
                "candidates_per_iteration": CANDIDATES,
            })
            assert created.status_code == 201, created.text
            run_id = created.json()["id"]

            wait_for(lambda: client.get(f"/runs/{run_id}").json().get("phase") == "evaluating", 300,
                     "the first evaluation", interval=0.2)
            evaluator = kill_child(stack, "worker-eval-cpu")
            wait_for(lambda: len(attempts_of(client, run_id)) >= CANDIDATES, 300, "iteration 1 to be recorded")
            cpu_worker = kill_child(stack, "worker-cpu")

            finished = wait_for(
                lambda: (run := client.get(f"/runs/{run_id}").json())["status"] != "running" and run,
                600, "the run to finish", interval=1.0,
            )
            attempts = attempts_of(client, run_id)
    finally:
        stack.stop(signal.SIGINT)
    log = (stack.home / "logs" / "up.log").read_text()
    assert f"worker-eval-cpu (pid {evaluator}) exited with code -9: restarting" in log
    assert f"worker-cpu (pid {cpu_worker}) exited with code -9: restarting" in log
    assert finished["status"] == "completed" and finished["iteration"] == ITERATIONS, finished
    keys = sorted((attempt["iteration"], attempt["index"]) for attempt in attempts)
    assert keys == [(i, k) for i in range(1, ITERATIONS + 1) for k in range(CANDIDATES)]
    best = next(attempt for attempt in attempts if attempt["id"] == finished["best_attempt_id"])
    assert best["status"] == "ok" and best["timing_kind"] == "interpreter"
