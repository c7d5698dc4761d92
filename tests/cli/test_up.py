"""``marathon up`` end to end: a real Temporal dev server, API and workers as child processes."""

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import httpx

from tests.cli.stack import REPO, free_ports, listening_addresses, new_stack, wait_for

# Fake credentials in the shell that runs `marathon up` (see test_secrets_reach_only_their_children).
LIVE_STACK_ENV = {
    "MARATHON_LLM_API_KEY": "sk-fake-llm-key",
    "OPENAI_API_KEY": "sk-fake-openai-key",
    "MARATHON_API_TOKEN": "mt_fake-client-token",
    "AWS_SECRET_ACCESS_KEY": "fake-aws-secret",
}


def test_banner_says_where_everything_is(live_stack):
    banner = live_stack.output()
    token = live_stack.token
    assert f"API          {live_stack.api_url}" in banner
    assert f"{live_stack.api_url}/docs" in banner
    assert f"http://127.0.0.1:{live_stack.ui_port}" in banner
    assert f"{live_stack.api_url}/runs/<run id>/page" in banner
    assert token in banner
    assert banner.count(token) == 1
    assert "every worker polls its task queue" in banner and "NOT READY" not in banner


def test_up_means_every_worker_polls_and_a_run_can_start_at_once(live_stack):
    health = httpx.get(f"{live_stack.api_url}/healthz", timeout=10).json()
    assert health["ready"] is True, health
    assert health["workers"] == {"marathon-cpu": "polling", "marathon-gpu-cpu": "polling"}


def test_health_docs_and_temporal_ui_answer(live_stack):
    assert httpx.get(f"{live_stack.api_url}/healthz", timeout=10).status_code == 200
    assert httpx.get(f"{live_stack.api_url}/docs", timeout=10).status_code == 200
    assert "/runs" in httpx.get(f"{live_stack.api_url}/openapi.json", timeout=10).json()["paths"]
    assert httpx.get(f"http://127.0.0.1:{live_stack.ui_port}/", timeout=10).status_code == 200


def test_token_file_is_private_and_accepted(live_stack):
    path = live_stack.home / "api-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert live_stack.token.startswith("mt_")
    with live_stack.client() as client:
        assert client.get("/runs").status_code == 200
    with live_stack.client(token="mt_not-a-token") as client:
        assert client.get("/runs").status_code == 401
    assert httpx.get(f"{live_stack.api_url}/runs", timeout=10).status_code == 401


def test_api_listens_on_localhost_only(live_stack):
    assert listening_addresses(live_stack.api_port) == ["0100007F"]


def test_token_never_reaches_the_logs(live_stack):
    token = live_stack.token
    with live_stack.client() as client:
        client.get("/runs")
    logs = list((live_stack.home / "logs").glob("*.log"))
    assert {path.name for path in logs} >= {"temporal.log", "api.log", "worker-cpu.log", "worker-eval-cpu.log", "up.log"}
    for path in logs:
        assert token not in path.read_text(errors="replace"), path.name


def test_secrets_reach_only_their_children(live_stack):
    """What each running child holds, read where anything on the machine running as the same
    user (a kernel that escaped the judge's sandbox) would read it: /proc/<pid>/environ."""
    children = live_stack.stack_file()["children"]
    environ = {name: Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace") for name, pid in children.items()}
    assert set(environ) == {"temporal", "api", "worker-cpu", "worker-eval-cpu"}
    for name, text in environ.items():
        got = {key for key, value in LIVE_STACK_ENV.items() if value in text}
        assert got == ({"MARATHON_LLM_API_KEY"} if name == "worker-cpu" else set()), name
    assert "MARATHON_DATABASE_URL=" in environ["worker-eval-cpu"]
    assert "MARATHON_DATABASE_URL=" not in environ["temporal"]


def test_a_child_that_dies_is_restarted(live_stack):
    before = live_stack.stack_file()["children"]["worker-cpu"]
    os.kill(before, signal.SIGKILL)

    def restarted():
        pid = live_stack.stack_file()["children"]["worker-cpu"]
        return pid if pid != before and os.path.exists(f"/proc/{pid}") else None

    after = wait_for(restarted, 30, "the CPU worker to be restarted")
    log = (live_stack.home / "logs" / "up.log").read_text()
    assert f"worker-cpu (pid {before}) exited with code -9: restarting" in log
    assert f"restarted worker-cpu (pid {after}, restart 1)" in log


def _up(home, *ports, timeout=60):
    api, temporal, ui = ports
    return subprocess.run(
        [sys.executable, "-m", "marathon.cli", "up", "--home", str(home), "--api-port", str(api),
         "--temporal-port", str(temporal), "--ui-port", str(ui), "--gpus", "none"],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )


def test_second_up_on_the_same_home_is_refused(live_stack):
    result = _up(live_stack.home, *free_ports(3))
    assert result.returncode == 1
    assert "another `marathon up`" in result.stderr
    assert f"is already running on {live_stack.home}" in result.stderr


def test_a_busy_port_is_named(live_stack, tmp_path):
    _, temporal, ui = free_ports(3)
    result = _up(tmp_path / "home", live_stack.api_port, temporal, ui)
    assert result.returncode == 1
    assert f"port {live_stack.api_port} on 127.0.0.1 is already in use: pass --api-port" in result.stderr


def test_bad_flags_are_usage_errors(tmp_path):
    result = _up(tmp_path / "home", 9000, 9000, 9001)
    assert result.returncode == 2
    assert "ports must differ" in result.stderr


def test_sigterm_stops_every_process_too(tmp_path):
    from tests.cli.stack import descendants, still_alive

    stack = new_stack(tmp_path / "home")
    stack.start()
    processes = descendants(stack.process.pid)
    assert len(processes) >= 4
    assert stack.stop(signal.SIGTERM) == 0
    assert still_alive(processes) == []
    assert not (stack.home / "stack.json").exists()
    assert "received SIGTERM: stopping" in (stack.home / "logs" / "up.log").read_text()
