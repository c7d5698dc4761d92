"""The API as its own process (uvicorn, as ``marathon up`` runs it), so a test can SIGKILL it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.cli.stack import free_ports

REPO = Path(__file__).resolve().parents[2]


class ProcessApi:
    """``python -m uvicorn api.main:create_app --factory`` with Marathon settings from ``env``."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.port = free_ports(1)[0]
        self.env = {**os.environ, **env, "PYTHONPATH": str(REPO)}
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> "ProcessApi":
        argv = [sys.executable, "-m", "uvicorn", "api.main:create_app", "--factory",
                "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(argv, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the API exited with {self.process.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the API did not answer /healthz in {timeout_s:g} s")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs, open requests and connections just die."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
