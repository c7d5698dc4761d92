"""The embedded stack behind ``marathon up``: one supervisor, several child processes.

The supervisor brings the stack up in order (the Temporal dev server; the store's schema and
the API token; the API; the workers, one per GPU or one in CPU mode), waits until every worker
polls its task queue, prints where everything is, then restarts any child that exits until it
is asked to stop, and stops the children in order (workers, API, Temporal).

What it starts is decided in ``marathon.stack_config``; how one child is started, restarted,
stopped and which secrets it gets, in ``marathon.processes``; which GPUs there are, in
``marathon.gpus``.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Callable, Optional, TextIO

import httpx

from marathon.child_logs import ChildTrouble, diagnose, explained_by_crashes
from marathon.client import TOKEN_FILE_NAME
from marathon.gpus import evaluation_archs, visible_gpus
from marathon.settings import get_settings
from marathon.resumed_runs import resumed_line, runs_in_flight
from marathon.processes import (
    Child,
    ChildSpec,
    port_accepts,
    port_is_free,
    reap_adopted,
    supervising,
    tend,
)
from marathon.stack_config import StackConfig, api_spec, child_env, temporal_spec, worker_specs

log = logging.getLogger("marathon.up")

STACK_FILE_NAME = "stack.json"
LOCK_FILE_NAME = "up.lock"
READY_TIMEOUT_S = 120.0


class StackError(Exception):
    """The stack could not start; the message says what to do."""


def ensure_token(config: StackConfig) -> Optional[str]:
    """Make sure ``<home>/api-token`` holds a token the store accepts.

    Returns the plaintext when a new token was created (to be shown once), None when the file
    already held a valid one. The file is created with mode 0600 before the token is written.
    """
    from store.db import session_scope
    from store.repository import create_token, verify_token

    path = config.home / TOKEN_FILE_NAME
    if path.exists():
        existing = path.read_text().strip()
        with session_scope(config.database) as session:
            if existing and verify_token(session, existing):
                os.chmod(path, 0o600)
                return None
        log.warning("the token in %s is not in the store (a new database?): creating a new one", path)
    with session_scope(config.database) as session:
        token = create_token(session, name="local user (marathon up)")
    # A fresh file, so it never holds the token with an older, wider mode.
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(token + "\n")
    os.chmod(path, 0o600)
    return token


def migrate(config: StackConfig) -> None:
    from store.db import dispose_engine, upgrade

    upgrade(config.database)
    dispose_engine(config.database)


class DevStack:
    """Starts the children, restarts the ones that die, and stops them all on SIGINT/SIGTERM."""

    def __init__(self, config: StackConfig, out: TextIO = sys.stdout):
        self.config = config
        self.out = out
        self.children: list[Child] = []
        self.stopping = threading.Event()
        self.gpus: list[str] = []
        self.not_polling: list[str] = []
        self.troubles: list[ChildTrouble] = []
        self.in_flight: list[str] = []
        self._lock_handle: Optional[TextIO] = None

    def _handle_signal(self, signum, _frame) -> None:
        if not self.stopping.is_set():
            log.info("received %s: stopping", signal.Signals(signum).name)
        self.stopping.set()

    def _acquire_home(self) -> None:
        handle = open(self.config.home / LOCK_FILE_NAME, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise StackError(
                f"another `marathon up` (pid {holder}) is already running on {self.config.home}: "
                "stop it first, or pass --home for a separate stack"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._lock_handle = handle

    def _check_ports(self) -> None:
        wanted = [
            ("--api-port", self.config.api_host, self.config.api_port),
            ("--temporal-port", self.config.temporal_host, self.config.temporal_port),
            ("--ui-port", self.config.temporal_host, self.config.ui_port),
        ]
        for flag, host, port in wanted:
            if not port_is_free(host, port):
                raise StackError(f"port {port} on {host} is already in use: pass {flag} with a free port")

    def _setup_logging(self) -> None:
        # The home holds the API token: keep it private when we create it.
        self.config.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.config.log_dir.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(self.config.log_dir / "up.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        console = logging.StreamHandler(sys.stderr)
        console.setFormatter(logging.Formatter("marathon up: %(message)s"))
        log.handlers[:] = [handler, console]
        log.setLevel(logging.INFO)
        log.propagate = False

    def _spawn(self, spec: ChildSpec, env: dict[str, str]) -> Child:
        child = Child(spec, self.config.log_dir, env)
        child.start()
        log.info("started %s (pid %d), log %s", spec.name, child.pid, child.log_path)
        self.children.append(child)
        return child

    def _wait_until(self, what: str, ready: Callable[[], bool], child: Child) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.stopping.is_set():
                raise StackError(f"interrupted while waiting for {what}")
            if ready():
                return
            code = child.exited()
            if code is not None:
                raise StackError(f"{what} exited with code {code} while starting: see {child.log_path}")
            time.sleep(0.2)
        raise StackError(f"{what} was not ready after {READY_TIMEOUT_S:.0f} s: see {child.log_path}")

    def _api_healthy(self) -> bool:
        try:
            return httpx.get(f"{self.config.api_url}/healthz", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def _expected_queues(self) -> list[tuple[str, str]]:
        """(task queue, what must poll it) before runs can start.

        The API routes a new run to the first evaluation queue that has a worker, so a run
        created before the evaluation worker polls would wait for a GPU that never comes.
        """
        settings = get_settings()
        # The CPU worker serves the workflows and the propose/record activities on one queue.
        queues = [(settings.cpu_task_queue, "workflow and activity")]
        for arch in evaluation_archs(self.gpus):
            queues.append((settings.evaluate_queue(arch), "activity"))
        return queues

    def _not_polled(self, queues: list[tuple[str, str]]) -> list[str]:
        """``"<queue> (<kind>)"`` of each expected queue the API does not report polled. The API
        owns who polls (it asks Temporal for every queue it routes to, api/temporal.py): the stack
        reads its health rather than asking Temporal again; all are missing while it cannot answer."""
        try:
            workers = httpx.get(f"{self.config.api_url}/healthz", timeout=10.0).json().get("workers") or {}
        except (httpx.HTTPError, ValueError, AttributeError):
            workers = {}
        return [f"{queue} ({kind})" for queue, kind in queues if workers.get(queue) != "polling"]

    def _wait_for_pollers(self) -> None:
        queues = self._expected_queues()
        deadline = time.monotonic() + READY_TIMEOUT_S
        missing = [f"{queue} ({kind})" for queue, kind in queues]
        while time.monotonic() < deadline and not self.stopping.is_set():
            missing = self._not_polled(queues)
            if not missing or self._all_explained_by_crashes(missing):
                # A worker that exited while starting (no sandbox, a bad setting) will not
                # poll before the supervisor restarts it: say why now rather than after the timeout.
                break
            time.sleep(0.5)
        if self.stopping.is_set():
            raise StackError("interrupted while waiting for the workers")
        self.not_polling = missing
        if missing:
            self.troubles = self._worker_troubles()
            log.warning(
                "no worker polls %s: not ready; runs cannot be served until one does: %s",
                ", ".join(missing), "; ".join(f"{t.name}: {t.error}" for t in self.troubles) or self.config.log_dir,
            )

    def _workers(self) -> list[Child]:
        return [child for child in self.children if child.spec.name.startswith("worker")]

    def _crashed_workers(self) -> list[Child]:
        return [child for child in self._workers() if child.exited() is not None]

    def _all_explained_by_crashes(self, missing: list[str]) -> bool:
        crashed = {child.spec.name for child in self._crashed_workers()}
        return explained_by_crashes(missing, crashed, get_settings().cpu_task_queue)

    def _worker_troubles(self) -> list[ChildTrouble]:
        """Why the workers do not poll: those that exited, else every worker, from their logs."""
        workers = self._crashed_workers() or self._workers()
        return [diagnose(child.spec.name, child.log_path, child.exited()) for child in workers]

    def start(self) -> Optional[str]:
        """Bring everything up; returns a newly created token (or None if the old one is kept)."""
        config = self.config
        self._setup_logging()
        self._acquire_home()
        self._check_ports()
        env = child_env(config)
        temporal = self._spawn(temporal_spec(config), env)
        self._wait_until(
            "the Temporal dev server", lambda: port_accepts(config.temporal_host, config.temporal_port), temporal
        )
        log.info("running store migrations on %s", _redact(config.database))
        migrate(config)
        token = ensure_token(config)
        self.in_flight = runs_in_flight(config.database)
        api = self._spawn(api_spec(config), env)
        self._wait_until("the API", self._api_healthy, api)
        self.gpus = visible_gpus(config.gpus)
        for spec in worker_specs(config, self.gpus):
            self._spawn(spec, env)
        self._wait_for_pollers()
        self._write_stack_file()
        return token

    def _write_stack_file(self) -> None:
        info = {
            "pid": os.getpid(),
            "api_url": self.config.api_url,
            "temporal_address": self.config.temporal_address,
            "temporal_ui_url": self.config.ui_url,
            "namespace": self.config.namespace,
            "children": {child.spec.name: child.pid for child in self.children},
        }
        # Written whole and renamed into place: the CLI and tests read it while children restart,
        # and a reader must never see a half-written (empty) file.
        path = self.config.home / STACK_FILE_NAME
        partial = path.with_name(f".{STACK_FILE_NAME}.{os.getpid()}")
        partial.write_text(json.dumps(info, indent=2) + "\n")
        os.replace(partial, path)

    def banner(self, token: Optional[str]) -> str:
        c = self.config
        workers = ", ".join(child.spec.name for child in self.children if child.spec.name.startswith("worker"))
        mode = f"{len(self.gpus)} GPU(s)" if self.gpus else "no GPU: CPU mode, Triton interpreter timings"
        token_file = c.home / TOKEN_FILE_NAME
        if token:
            token_line = f"  API token    {token}\n               (shown once; saved to {token_file}, mode 0600)"
        else:
            token_line = f"  API token    in {token_file} (created on first start)"
        exposed = []
        if c.api_host not in ("127.0.0.1", "localhost", "::1"):
            exposed = [f"  WARNING      the API listens on {c.api_host}, beyond this machine: serve it behind TLS"]
        # "up" only when every worker started polls its queue (_wait_for_pollers); else say what is missing.
        not_polling = self.not_polling
        if not_polling:
            title = [
                f"Marathon started but is NOT READY (home {c.home}): no worker polls {', '.join(not_polling)}; "
                f"runs cannot start until one does (the supervisor keeps restarting it; {c.log_dir}, "
                f"{c.api_url}/healthz). Why:",
                *[line for trouble in self.troubles for line in trouble.lines()],
            ]
        else:
            title = [f"Marathon is up (home {c.home}): every worker polls its task queue"]
        return "\n".join(
            [
                *title,
                *exposed,
                f"  API          {c.api_url}   (OpenAPI docs: {c.api_url}/docs)",
                f"  Temporal UI  {c.ui_url}/namespaces/{c.namespace}/workflows",
                f"  Temporal     {c.temporal_address}   (state in {c.home / 'temporal.db'})",
                f"  Run page     {c.api_url}/runs/<run id>/page",
                f"  Store        {_redact(c.database)}",
                f"  Workers      {workers}   ({mode})",
                *self._problem_lines(),
                *resumed_line(self.in_flight),
                f"  Logs         {c.log_dir}/",
                token_line,
                "Press Ctrl-C to stop.",
            ]
        )

    def _problem_lines(self) -> list[str]:
        from marathon.problem_registration import registration_lines

        return registration_lines(self.config.database)

    def _reap_adopted(self, kill: bool = False) -> None:
        reap_adopted({child.pid for child in self.children if child.pid is not None}, kill=kill)

    def supervise(self) -> None:
        """Restart children that exit until asked to stop."""
        while not self.stopping.wait(0.5):
            self._reap_adopted()
            if tend(self.children, time.monotonic()):
                self._write_stack_file()

    def stop(self) -> None:
        """Workers first (they may hold tasks), then the API, then Temporal."""
        for child in reversed(self.children):
            if child.process is None or child.exited() is not None:
                continue
            code = child.stop()
            log.info("stopped %s (pid %d, exit code %s)", child.spec.name, child.pid, code)
        self._reap_adopted(kill=True)
        if self._lock_handle is not None:
            (self.config.home / STACK_FILE_NAME).unlink(missing_ok=True)
            self._lock_handle.close()
            self._lock_handle = None

    def run(self) -> int:
        with supervising(self._handle_signal):
            try:
                try:
                    token = self.start()
                except StackError as error:
                    log.error("%s", error)
                    return 1
                print(self.banner(token), file=self.out, flush=True)
                self.supervise()
                return 0
            finally:
                self.stop()


def _redact(url: str) -> str:
    """A database URL without its password, for logs."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("@")[-1]
