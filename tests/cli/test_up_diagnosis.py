"""What ``marathon up`` says when a worker does not poll: the worker's own last error line and the
fix (read from its log), not only "not ready"; and which runs it resumed."""

import os
import sys
from pathlib import Path

from marathon.child_logs import diagnose, last_error_line, latest_start
from marathon.devstack import DevStack
from marathon.resumed_runs import resumed_line, runs_in_flight
from marathon.processes import Child
from marathon.stack_config import StackConfig, worker_specs
from store.db import session_scope, upgrade
from store.repository import create_run
from tests.cli.stack import wait_for


def test_the_latest_start_s_last_error_line_is_read(tmp_path):
    log = tmp_path / "worker.log"
    log.write_text(
        "\n--- 2026-01-01 10:00:00 starting: marathon worker gpu\n"
        "2026-01-01 10:00:01 ERROR an older failure, fixed since\n"
        "\n--- 2026-01-01 10:05:00 starting: marathon worker gpu\n"
        "2026-01-01 10:05:01 INFO connecting\n"
        "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
        "ModuleNotFoundError: No module named 'my_problem'\n"
        "2026-01-01 10:05:02 INFO shutting down\n"
    )
    assert "an older failure" not in latest_start(log)
    assert last_error_line(latest_start(log)) == "ModuleNotFoundError: No module named 'my_problem'"
    trouble = diagnose("worker-cpu", log, 1)
    assert trouble.fix.startswith("install the missing package")


def test_a_silent_crash_names_its_exit_code_and_log(tmp_path):
    trouble = diagnose("worker-cpu", tmp_path / "missing.log", 3)
    assert trouble.error == f"exited with code 3; see {tmp_path / 'missing.log'}" and trouble.fix == ""


def test_an_evaluation_worker_without_bubblewrap_says_why_and_the_fix_in_the_banner(tmp_path):
    """The real CPU-mode evaluation worker, started as `marathon up` starts it but on a PATH
    without bwrap: it refuses to start, and the banner quotes its reason and the fix."""
    config = StackConfig(home=tmp_path / "home")
    config.log_dir.mkdir(parents=True)
    spec = worker_specs(config, [])[1]
    no_bwrap = tmp_path / "bin"
    no_bwrap.mkdir()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{no_bwrap}",
           "MARATHON_HOME": str(config.home), "MARATHON_INSECURE_NO_ISOLATION": "0"}
    child = Child(spec, config.log_dir, env)
    child.start()
    wait_for(lambda: child.exited() is not None, 120, "the evaluation worker to refuse")
    stack = DevStack(config)
    stack.children = [child]
    stack.not_polling = ["marathon-gpu-cpu (activity)"]
    stack.troubles = stack._worker_troubles()
    banner = stack.banner(None)
    assert "NOT READY" in banner
    assert "worker-eval-cpu: " in banner and "bubblewrap (bwrap) is not installed" in banner
    assert "fix: install it: ./scripts/setup-system demo" in banner


def test_the_banner_names_the_runs_it_resumed(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    assert runs_in_flight(url) == [] and resumed_line([]) == []
    with session_scope(url) as session:
        for run_id in ("kda-a", "kda-b"):
            create_run(session, run_id=run_id, problem="kda", goal={}, budget={}, proposer={},
                       candidates_per_iteration=1, workflow_id=run_id)
    in_flight = runs_in_flight(url)
    assert sorted(in_flight) == ["kda-a (running)", "kda-b (running)"]
    assert resumed_line(in_flight)[0].startswith("  Resumed      2 run(s) that were in flight: ")


def test_up_stops_waiting_only_once_every_missing_queue_has_a_crashed_worker():
    from marathon.child_logs import explained_by_crashes

    cpu, evaluation = ["marathon-cpu (workflow)", "marathon-cpu (activity)"], ["marathon-gpu-cpu (activity)"]
    # The evaluation worker exited; the CPU worker is only slow to start: keep waiting for it.
    assert not explained_by_crashes(cpu + evaluation, {"worker-eval-cpu"}, "marathon-cpu")
    assert explained_by_crashes(evaluation, {"worker-eval-cpu"}, "marathon-cpu")
    assert explained_by_crashes(cpu + evaluation, {"worker-eval-cpu", "worker-cpu"}, "marathon-cpu")
    assert not explained_by_crashes(evaluation, set(), "marathon-cpu")
    assert not explained_by_crashes(evaluation, {"worker-cpu"}, "marathon-cpu")
