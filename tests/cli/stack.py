"""Start and stop a real ``marathon up`` in a subprocess, and look at its processes through /proc."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import httpx

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 180.0


def free_ports(count: int) -> list[int]:
    """Distinct ports that were free a moment ago (held open together so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            sockets.append(probe)
        return [probe.getsockname()[1] for probe in sockets]
    finally:
        for probe in sockets:
            probe.close()


def parent_of(pid: int) -> Optional[int]:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def start_time(pid: int) -> Optional[str]:
    """The process's start time in clock ticks: tells a live process from a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None
    return fields[19]


def descendants(root: int) -> dict[int, str]:
    """Every live descendant of ``root``: pid -> start time."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            ppid = parent_of(int(entry))
            if ppid is not None:
                children.setdefault(ppid, []).append(int(entry))
    found: dict[int, str] = {}
    queue = list(children.get(root, []))
    while queue:
        pid = queue.pop()
        started = start_time(pid)
        if started is not None:
            found[pid] = started
        queue.extend(children.get(pid, []))
    return found


def still_alive(processes: dict[int, str]) -> list[int]:
    return [pid for pid, started in processes.items() if start_time(pid) == started]


def listening_addresses(port: int) -> list[str]:
    """The local IPv4/IPv6 addresses (hex, as /proc/net spells them) listening on ``port``."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            parts = line.split()
            address, port_hex = parts[1].split(":")
            if parts[3] == "0A" and int(port_hex, 16) == port:
                found.append(address)
    return found


@dataclass
class Stack:
    home: Path
    api_port: int
    temporal_port: int
    ui_port: int
    process: Optional[subprocess.Popen] = None
    output_path: Optional[Path] = None
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def token(self) -> str:
        return (self.home / "api-token").read_text().strip()

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        for name in ("MARATHON_API_TOKEN", "MARATHON_API_PORT", "MARATHON_API_HOST", "MARATHON_PUBLIC_URL"):
            env.pop(name, None)
        env.update({"MARATHON_HOME": str(self.home), "PYTHONUNBUFFERED": "1"}, **self.extra_env)
        return env

    def output(self) -> str:
        return self.output_path.read_text() if self.output_path and self.output_path.exists() else ""

    def start(self, *extra: str) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        runs = len(list(self.home.glob("up-output-*.txt")))
        self.output_path = self.home / f"up-output-{runs}.txt"
        with open(self.output_path, "wb") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable, "-m", "marathon.cli", "up", "--home", str(self.home),
                    "--api-port", str(self.api_port), "--temporal-port", str(self.temporal_port),
                    "--ui-port", str(self.ui_port), "--gpus", "none", *extra,
                ],
                cwd=REPO, env=self.env(), stdout=out, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"marathon up exited with {self.process.returncode}:\n{self.output()}")
            if "Press Ctrl-C to stop." in self.output():
                return
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"marathon up did not come up in {START_TIMEOUT_S:.0f} s:\n{self.output()}")

    def stack_file(self) -> dict:
        return json.loads((self.home / "stack.json").read_text())

    def client(self, token: Optional[str] = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.api_url, headers={"Authorization": f"Bearer {token or self.token}"}, timeout=30
        )

    def stop(self, signum: int = signal.SIGINT, timeout: float = 90.0) -> int:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signum)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for pid in descendants(self.process.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.process.kill()
            self.process.wait()
            raise


def new_stack(home: Path) -> Stack:
    api_port, temporal_port, ui_port = free_ports(3)
    return Stack(home=home, api_port=api_port, temporal_port=temporal_port, ui_port=ui_port)


def wait_for(predicate, timeout: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
