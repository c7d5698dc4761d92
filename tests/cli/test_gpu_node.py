"""``marathon worker gpus`` (a GPU node's supervisor) and ``marathon worker health``, on CPU: the
GPUs are faked (``CUDA_VISIBLE_DEVICES``, or an ``nvidia-smi`` script on PATH) and so are the
workers (a Python one-liner that records its environment and sleeps); the supervisor, its
restarts, its SIGTERM handling and the health check are the real ones, in a real subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from marathon.gpu_node import GpuNode, check_health
from tests.cli.stack import REPO, wait_for

# What each fake worker records: its pid, its GPU and which of these variables it got.
FAKE_WORKER = textwrap.dedent(
    """
    import json, os, sys, time
    names = ("CUDA_VISIBLE_DEVICES", "MARATHON_LLM_API_KEY", "MARATHON_DATABASE_URL", "MARATHON_TEMPORAL_TLS_KEY")
    record = {"pid": os.getpid(), "env": {name: os.environ.get(name) for name in names}}
    out = os.path.join(sys.argv[1], "worker-%d.json" % os.getpid())
    open(out, "w").write(json.dumps(record))
    time.sleep(600)
    """
)

SUPERVISOR = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import marathon.processes
    from marathon.gpu_node import GpuNode
    # A first restart after 6 s, not 1 s: the health check (a new Python process, seconds under
    # load) must be able to see the killed worker down before it comes back.
    marathon.processes.BACKOFF_FIRST_S = 6.0
    from marathon.gpus import visible_gpus
    records, status = sys.argv[1], Path(sys.argv[2])
    gpus = visible_gpus("auto")
    if not gpus:
        sys.exit(3)
    command = [sys.executable, "-c", sys.argv[3], records]
    sys.exit(GpuNode(gpus, command, status, stop_grace_s=5).run())
    """
)


def _records(folder: Path) -> dict[int, dict]:
    found = {}
    for path in folder.glob("worker-*.json"):
        try:
            record = json.loads(path.read_text())
        except ValueError:  # being written
            continue
        found[record["pid"]] = record
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _health(status: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "marathon.cli", "worker", "health", "--status-file", str(status)],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )


def _start_node(tmp_path: Path, env_changes: dict[str, str | None]) -> tuple[subprocess.Popen, Path, Path]:
    records = tmp_path / "records"
    records.mkdir()
    status = tmp_path / "home" / "gpu-node.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "MARATHON_LLM_API_KEY": "sk-fake-llm",
           "MARATHON_DATABASE_URL": "postgresql://u:pw@db.example/marathon?sslmode=verify-full",
           "MARATHON_TEMPORAL_TLS_KEY": "/run/marathon/certs/client.key"}
    for name, value in env_changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    node = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, str(records), str(status), FAKE_WORKER],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    return node, records, status


@pytest.fixture
def fake_nvidia_smi(tmp_path):
    """An ``nvidia-smi`` on PATH that lists GPUs 0 and 1 (the supervisor's discovery when
    ``CUDA_VISIBLE_DEVICES`` is unset)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text("#!/bin/sh\nprintf '0\\n1\\n'\n")
    script.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


@pytest.mark.parametrize("discovery", ["cuda-visible-devices", "nvidia-smi"])
def test_one_pinned_worker_per_gpu_restarted_after_a_kill_and_all_stopped_on_sigterm(
    tmp_path, fake_nvidia_smi, discovery
):
    if discovery == "nvidia-smi":
        changes = {"CUDA_VISIBLE_DEVICES": None, "PATH": fake_nvidia_smi}
        expected_gpus = {"0", "1"}
    else:
        changes = {"CUDA_VISIBLE_DEVICES": "2,5"}
        expected_gpus = {"2", "5"}
    node, records, status = _start_node(tmp_path, changes)
    try:
        wait_for(lambda: len(_records(records)) == 2 and status.exists(), 30, "two workers and a status file")
        first = _records(records)
        assert {record["env"]["CUDA_VISIBLE_DEVICES"] for record in first.values()} == expected_gpus
        for record in first.values():
            # The evaluator's secrets only: the store and Temporal's mTLS files, never the LLM key.
            assert record["env"]["MARATHON_LLM_API_KEY"] is None
            assert record["env"]["MARATHON_DATABASE_URL"].endswith("sslmode=verify-full")
            assert record["env"]["MARATHON_TEMPORAL_TLS_KEY"] == "/run/marathon/certs/client.key"
        healthy = _health(status)
        assert healthy.returncode == 0, healthy.stdout
        assert "2 GPU worker(s) running" in healthy.stdout

        victim_pid, victim = next(iter(first.items()))
        os.kill(victim_pid, signal.SIGKILL)
        # Down until the restart (6 s backoff here): the status file says so within a poll.
        down = wait_for(lambda: (check := _health(status)).returncode == 1 and check, 10, "health to see the kill")
        assert f"1 of 2 GPU worker(s) not running: worker-gpu{victim['env']['CUDA_VISIBLE_DEVICES']}" in down.stdout
        wait_for(lambda: len(_records(records)) == 3, 30, "the killed worker to be restarted")
        restarted = {pid: r for pid, r in _records(records).items() if pid not in first}
        (new_pid, new_record), = restarted.items()
        assert new_record["env"]["CUDA_VISIBLE_DEVICES"] == victim["env"]["CUDA_VISIBLE_DEVICES"]
        wait_for(lambda: _health(status).returncode == 0, 10, "health after the restart")
        workers = {w["gpu"]: w for w in json.loads(status.read_text())["workers"]}
        assert workers[victim["env"]["CUDA_VISIBLE_DEVICES"]]["restarts"] == 1
        assert workers[victim["env"]["CUDA_VISIBLE_DEVICES"]]["pid"] == new_pid

        node.send_signal(signal.SIGTERM)
        assert node.wait(timeout=30) == 0, node.stdout.read()
        running = [pid for pid in _records(records) if _alive(pid)]
        assert running == []
        assert not status.exists()
        assert _health(status).returncode == 1
    finally:
        if node.poll() is None:
            node.kill()
            node.wait()
        for pid in _records(records):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_gpus_exits_non_zero_with_a_message_when_no_gpu_is_visible(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "", "MARATHON_HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "marathon.cli", "worker", "gpus"],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=60,
    )
    assert result.returncode == 1
    assert "no GPU is visible" in result.stderr and "deploy.resources.reservations.devices" in result.stderr
    assert not (tmp_path / "gpu-node.json").exists()


def _status(path: Path, written_at: float, workers: list[dict]) -> Path:
    path.write_text(json.dumps({"pid": os.getpid(), "written_at": written_at, "workers": workers}))
    return path


def test_health_needs_a_fresh_status_file_and_every_worker_running(tmp_path):
    me = {"name": "worker-gpu0", "gpu": "0", "pid": os.getpid(), "alive": True, "restarts": 0}
    now = time.time()
    assert check_health(_status(tmp_path / "ok.json", now - 1, [me]), 30, now)[0]

    healthy, reason = check_health(_status(tmp_path / "old.json", now - 31, [me]), 30, now)
    assert not healthy and "31 s ago (limit 30 s)" in reason

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = {**me, "name": "worker-gpu1", "gpu": "1", "pid": gone.pid}
    healthy, reason = check_health(_status(tmp_path / "dead.json", now, [me, dead]), 30, now)
    assert not healthy and "1 of 2 GPU worker(s) not running: worker-gpu1 (GPU 1)" in reason

    restarting = {**me, "alive": False}
    assert not check_health(_status(tmp_path / "restarting.json", now, [restarting]), 30, now)[0]
    assert not check_health(_status(tmp_path / "empty.json", now, []), 30, now)[0]
    (tmp_path / "torn.json").write_text("{")
    healthy, reason = check_health(tmp_path / "torn.json", 30, now)
    assert not healthy and "unreadable" in reason


def test_node_refuses_no_gpu_and_repeated_ids(tmp_path):
    with pytest.raises(ValueError, match="at least one GPU"):
        GpuNode([], ["true"], tmp_path / "s.json")
    with pytest.raises(ValueError, match=r"distinct, got \['0', '0'\]"):
        GpuNode(["0", "0"], ["true"], tmp_path / "s.json")
