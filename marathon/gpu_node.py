"""A GPU node's supervisor, behind ``marathon worker gpus``: one evaluation worker per visible
GPU (each pinned with ``CUDA_VISIBLE_DEVICES``), restarted when it dies, all stopped on
SIGINT/SIGTERM; and the health check a container runs against it (``marathon worker health``).

Health, defined: the supervisor rewrites a small status file (JSON, ``<home>/gpu-node.json``)
at least every ``STATUS_EVERY_S``; the node is healthy when that file is younger than the age
limit (the supervisor is alive and supervising) and every worker it lists is running (marked
alive by the supervisor and present in /proc). It does NOT prove that a worker polls Temporal: a
worker that is up but cannot reach the frontend is alive here, and shows as a missing poller on
the task queue (the Temporal UI, ``GET /healthz``).

Which GPUs: ``marathon.gpus.visible_gpus``; how a child is started, restarted and stopped, and
which secrets it gets: ``marathon.processes`` (shared with ``marathon up``).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Optional

from marathon.processes import Child, reap_adopted, supervising, tend
from marathon.stack_config import WORKER_STOP_GRACE_S, gpu_worker_spec

log = logging.getLogger("marathon.gpu_node")

STATUS_FILE_NAME = "gpu-node.json"
# The status file is rewritten at least this often (seconds), and at once when a worker changes.
STATUS_EVERY_S = 5.0
# A status file older than this (seconds) means the supervisor is gone or hung.
HEALTH_MAX_AGE_S = 30.0
POLL_S = 0.5
# How long a worker gets on SIGTERM before it is killed: its own graceful shutdown lets a running
# evaluation finish within marathon.workers.GPU_GRACEFUL_SHUTDOWN (20 min), plus a minute to exit.
# A container's stop grace period must be longer (deploy/gpu-node.yml: 22 min).
NODE_STOP_GRACE_S = 21 * 60.0


class GpuNode:
    """Supervises ``command`` once per GPU id of ``gpus``, publishing their state to ``status_path``.

    ``log_dir`` None: the workers write to this process's stdout/stderr (a container's log)."""

    def __init__(
        self,
        gpus: list[str],
        command: list[str],
        status_path: Path,
        log_dir: Optional[Path] = None,
        stop_grace_s: float = WORKER_STOP_GRACE_S,
        base_env: Optional[dict[str, str]] = None,
    ):
        if not gpus:
            raise ValueError("a GPU node needs at least one GPU id, got none")
        if len(set(gpus)) != len(gpus):
            raise ValueError(f"GPU ids must be distinct, got {gpus}")
        if stop_grace_s <= 0:
            raise ValueError(f"stop grace must be positive seconds, got {stop_grace_s}")
        env = dict(os.environ if base_env is None else base_env)
        self.gpus = list(gpus)
        self.status_path = Path(status_path)
        self.children = [Child(gpu_worker_spec(gpu, command, stop_grace_s), log_dir, env) for gpu in self.gpus]
        self.stopping = threading.Event()
        self._status_written_at = 0.0

    def _handle_signal(self, signum, _frame) -> None:
        if not self.stopping.is_set():
            log.info("received %s: stopping the GPU workers", signal.Signals(signum).name)
        self.stopping.set()

    def status(self) -> dict:
        return {
            "pid": os.getpid(),
            "written_at": time.time(),
            "workers": [
                {
                    "name": child.spec.name,
                    "gpu": gpu,
                    "pid": child.pid,
                    "alive": child.process is not None and child.exited() is None,
                    "restarts": child.restarts,
                }
                for gpu, child in zip(self.gpus, self.children)
            ],
        }

    def write_status(self) -> None:
        # Written whole and renamed into place: the health check never reads half a file.
        self.status_path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.status_path.with_name(f".{self.status_path.name}.{os.getpid()}")
        partial.write_text(json.dumps(self.status(), indent=2) + "\n")
        os.replace(partial, self.status_path)
        self._status_written_at = time.monotonic()

    def start(self) -> None:
        for child in self.children:
            child.start()
            gpu = child.spec.env["CUDA_VISIBLE_DEVICES"]
            log.info("started %s (pid %d) on GPU %s", child.spec.name, child.pid, gpu)
        self.write_status()

    def supervise(self) -> None:
        """Restart workers that exit until asked to stop; keep the status file fresh."""
        while not self.stopping.wait(POLL_S):
            reap_adopted({child.pid for child in self.children if child.pid is not None})
            alive_before = [child.exited() is None for child in self.children]
            restarted = tend(self.children, time.monotonic())
            alive_after = [child.exited() is None for child in self.children]
            stale = time.monotonic() - self._status_written_at >= STATUS_EVERY_S
            if restarted or alive_before != alive_after or stale:
                self.write_status()

    def stop(self) -> None:
        """SIGTERM every worker at once (each finishes its running evaluation within its grace),
        then wait for each, killing what outlives the grace; then the status file goes."""
        for child in self.children:
            child.signal(signal.SIGTERM)
        for child in self.children:
            if child.process is not None:
                code = child.stop()
                log.info("stopped %s (pid %d, exit code %s)", child.spec.name, child.pid, code)
        reap_adopted({child.pid for child in self.children if child.pid is not None}, kill=True)
        self.status_path.unlink(missing_ok=True)

    def run(self) -> int:
        with supervising(self._handle_signal):
            try:
                self.start()
                self.supervise()
                return 0
            finally:
                self.stop()


def check_health(
    status_path: Path, max_age_s: float = HEALTH_MAX_AGE_S, now: Optional[float] = None
) -> tuple[bool, str]:
    """(healthy, one line saying why) from the supervisor's status file; see the module's docstring."""
    now = time.time() if now is None else now
    try:
        status = json.loads(Path(status_path).read_text())
        written_at = float(status["written_at"])
        workers = list(status["workers"])
    except FileNotFoundError:
        return False, f"no status file {status_path}: is `marathon worker gpus` running with this home?"
    except (OSError, ValueError, KeyError, TypeError) as error:
        return False, f"unreadable status file {status_path}: {error}"
    age = now - written_at
    if age > max_age_s:
        return False, f"the supervisor last wrote {status_path} {age:.0f} s ago (limit {max_age_s:g} s): gone or hung"
    if not workers:
        return False, f"{status_path} lists no worker"
    down = [
        f"{worker.get('name')} (GPU {worker.get('gpu')})"
        for worker in workers
        if not worker.get("alive") or not worker.get("pid") or not Path(f"/proc/{worker['pid']}").exists()
    ]
    if down:
        return False, f"{len(down)} of {len(workers)} GPU worker(s) not running: {', '.join(down)}"
    return True, f"{len(workers)} GPU worker(s) running: " + ", ".join(
        f"{worker['name']} pid {worker['pid']}" for worker in workers
    )
