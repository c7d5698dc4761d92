"""The embedded stack behind ``marathon up``: one supervisor, several child processes.

Children: the Temporal dev server (SQLite under the home directory), the API (uvicorn), the CPU
worker, and one GPU worker per visible GPU (or one CPU-mode evaluation worker when there is none).
Each child runs in its own session, so a Ctrl-C in the terminal reaches only the supervisor,
which then stops the children in order (workers, API, Temporal). Each child also gets
``PR_SET_PDEATHSIG`` so it dies with the supervisor even when the supervisor is killed outright.
A child that exits unexpectedly is restarted with exponential backoff. Each child gets only the
secrets its role uses (``role_env``): the evaluation workers, which run untrusted kernels, never
see the LLM key nor any other credential.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, TextIO

import httpx

from marathon.client import TOKEN_FILE_NAME

log = logging.getLogger("marathon.up")

STACK_FILE_NAME = "stack.json"
LOCK_FILE_NAME = "up.lock"
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
# A child that stayed up this long is healthy again: its next crash restarts it at once.
STABLE_AFTER_S = 60.0
READY_TIMEOUT_S = 120.0
STOP_GRACE_S = {"temporal": 15.0, "api": 10.0}
WORKER_STOP_GRACE_S = 20.0


class StackError(Exception):
    """The stack could not start; the message says what to do."""


@dataclass
class StackConfig:
    home: Path
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    temporal_host: str = "127.0.0.1"
    temporal_port: int = 7233
    ui_port: int = 8233
    gpus: str = "auto"
    database_url: Optional[str] = None
    namespace: str = "default"

    def __post_init__(self) -> None:
        self.home = Path(self.home).expanduser().resolve()
        if self.gpus not in ("auto", "none"):
            raise ValueError(f"gpus must be 'auto' or 'none', got {self.gpus!r}")
        ports = {"api": self.api_port, "temporal": self.temporal_port, "ui": self.ui_port}
        for name, port in ports.items():
            if not 1 <= port <= 65535:
                raise ValueError(f"{name} port must be between 1 and 65535, got {port}")
        if len(set(ports.values())) != len(ports):
            raise ValueError(f"the API, Temporal and UI ports must differ, got {ports}")

    @property
    def api_url(self) -> str:
        host = "127.0.0.1" if self.api_host in ("0.0.0.0", "::") else self.api_host
        return f"http://{host}:{self.api_port}"

    @property
    def temporal_address(self) -> str:
        return f"{self.temporal_host}:{self.temporal_port}"

    @property
    def ui_url(self) -> str:
        return f"http://{self.temporal_host}:{self.ui_port}"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    @property
    def database(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'marathon.db'}"


@dataclass
class ChildSpec:
    """How to start one child: ``argv`` with extra ``env``; its output goes to ``logs/<name>.log``."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stop_grace_s: float = 10.0
    # Which secrets it gets: a key of ROLE_GRANTS; None gets none at all.
    role: Optional[str] = None


# Least privilege: each child gets the supervisor's environment less every secret, plus only the
# secrets its role uses. A secret is a variable whose name says so (*_API_KEY, *TOKEN, *SECRET,
# *PASSWORD, ...), a URL with a password in it, the store's URL or the LLM settings
# (MARATHON_LLM_*; its base URL may carry a key too). Names are compared in upper case: the
# settings read the environment case-insensitively, so `marathon_llm_api_key` is the key too.
#
# - temporal: nothing. The dev server keeps its state in SQLite under the home.
# - api: the store (API tokens are checked against it). Not MARATHON_API_TOKEN, which only the
#   client commands read, and not the LLM key.
# - worker-cpu: the store and the LLM settings (the proposer and the compactor call the LLM),
#   with the proxy variables, which may hold the proxy's password, to reach it.
# - evaluator (a GPU worker, or the CPU-mode evaluation worker): the store only. It does need
#   it: the evaluate activity reads the candidate's source from the store and writes the
#   judge's report there, and the worker brings the schema up to date when it starts. Never the
#   LLM key nor any other credential: this process runs untrusted kernels (the judge's sandbox
#   has its own scrubbed environment, but this one must hold nothing worth escaping for).
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE")
STORE_ENV = ("MARATHON_DATABASE_URL", "DATABASE_URL")
# libpq's own credentials, for a PostgreSQL URL that carries none.
LIBPQ_SECRET_ENV = ("PGPASSWORD", "PGSSLKEY")
LLM_ENV_PREFIX = "MARATHON_LLM_"
PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
_URL_WITH_PASSWORD = re.compile(r"^[a-z][a-z0-9+.-]*://[^/@\s:]*:[^/@\s]*@", re.IGNORECASE)

GRANTS: dict[str, Callable[[str], bool]] = {
    "store": lambda name: name in STORE_ENV or name in LIBPQ_SECRET_ENV,
    "llm": lambda name: name.startswith(LLM_ENV_PREFIX) or name in PROXY_ENV,
}
ROLE_GRANTS: dict[str, tuple[str, ...]] = {
    "temporal": (),
    "api": ("store",),
    "worker-cpu": ("store", "llm"),
    "evaluator": ("store",),
}


def is_secret(name: str, value: str) -> bool:
    """Whether a variable is kept from the children whose role does not grant it."""
    upper = name.upper()
    return (
        any(marker in upper for marker in SECRET_MARKERS)
        or upper in STORE_ENV
        or upper.startswith(LLM_ENV_PREFIX)
        or bool(_URL_WITH_PASSWORD.match(value))
    )


def role_env(role: Optional[str], base: Mapping[str, str]) -> dict[str, str]:
    """``base`` less the secrets that ``role`` (a key of ROLE_GRANTS, or None) does not use."""
    if role is not None and role not in ROLE_GRANTS:
        raise ValueError(f"unknown child role {role!r}: one of {', '.join(ROLE_GRANTS)}")
    grants = [GRANTS[grant] for grant in ROLE_GRANTS.get(role or "", ())]
    return {
        name: value
        for name, value in base.items()
        if not is_secret(name, value) or any(grant(name.upper()) for grant in grants)
    }


def visible_gpus(mode: str) -> list[str]:
    """The GPU ids a worker each: ``CUDA_VISIBLE_DEVICES`` when set, else what ``nvidia-smi`` lists."""
    if mode == "none":
        return []
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        value = os.environ["CUDA_VISIBLE_DEVICES"].strip()
        return [part.strip() for part in value.split(",") if part.strip() and part.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        listing = subprocess.run(
            [smi, "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if listing.returncode != 0:
        return []
    return [line.strip() for line in listing.stdout.splitlines() if line.strip().isdigit()]


def gpu_archs() -> dict[str, str]:
    """GPU index -> ``sm<major><minor>`` from ``nvidia-smi`` (no torch import); empty without one."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    try:
        listing = subprocess.run(
            [smi, "--query-gpu=index,compute_cap", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    archs = {}
    for line in listing.stdout.splitlines() if listing.returncode == 0 else []:
        index, _, capability = (part.strip() for part in line.partition(","))
        if index.isdigit() and capability:
            archs[index] = "sm" + capability.replace(".", "")
    return archs


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def port_accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, value)
    except OSError:
        pass


def _proc_stat(pid: int) -> Optional[list[str]]:
    """Fields of /proc/<pid>/stat after the command name (state, ppid, ...); None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def process_tree(root: int) -> dict[int, str]:
    """``root`` and its live descendants: pid -> start time (which tells a reused pid apart)."""
    children: dict[int, list[int]] = {}
    starts: dict[int, str] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            fields = _proc_stat(int(entry))
            if fields and fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry))
                starts[int(entry)] = fields[19]
    tree: dict[int, str] = {}
    queue = [root]
    while queue:
        pid = queue.pop()
        if pid in starts:
            tree[pid] = starts[pid]
        queue.extend(children.get(pid, []))
    return tree


def kill_leftovers(tree: dict[int, str]) -> list[int]:
    """SIGKILL every process of ``tree`` that is still the same process; returns their pids."""
    killed = []
    for pid, started in tree.items():
        fields = _proc_stat(pid)
        if fields and fields[0] != "Z" and fields[19] == started:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    return killed


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGTERM it when the supervisor dies."""
    PR_SET_PDEATHSIG = 1
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Child:
    """One supervised process and its restart bookkeeping."""

    def __init__(self, spec: ChildSpec, log_dir: Path, base_env: dict[str, str]):
        self.spec = spec
        self.log_path = log_dir / f"{spec.name}.log"
        # Fixed here once: a restart gets the same environment.
        self.env = role_env(spec.role, {**base_env, **spec.env})
        self.process: Optional[subprocess.Popen] = None
        self.started_at = 0.0
        self.restarts = 0
        self.backoff_s = BACKOFF_FIRST_S
        self.restart_at: Optional[float] = None

    @property
    def pid(self) -> Optional[int]:
        return self.process.pid if self.process else None

    def start(self) -> None:
        with open(self.log_path, "ab") as log_file:
            log_file.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(self.spec.argv)}\n".encode())
            log_file.flush()
            self.process = subprocess.Popen(
                self.spec.argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        self.started_at = time.monotonic()
        self.restart_at = None

    def exited(self) -> Optional[int]:
        """The exit code if the process has ended, else None."""
        if self.process is None:
            return None
        return self.process.poll()

    def schedule_restart(self, now: float) -> float:
        """Pick when to restart after an unexpected exit; returns the delay."""
        if now - self.started_at >= STABLE_AFTER_S:
            self.backoff_s = BACKOFF_FIRST_S
        delay = self.backoff_s
        self.backoff_s = min(self.backoff_s * 2, BACKOFF_MAX_S)
        self.restart_at = now + delay
        return delay

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signum)
            except ProcessLookupError:
                pass

    def stop(self) -> Optional[int]:
        """SIGTERM the child's process group, wait its grace period, then SIGKILL it; then kill
        whatever it started in other sessions (a judge's sandbox) that outlived it."""
        if self.process is None:
            return None
        tree = process_tree(self.process.pid)
        self.signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=self.spec.stop_grace_s)
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop within %.0f s: killing it", self.spec.name, self.spec.stop_grace_s)
            self.signal(signal.SIGKILL)
            code = self.process.wait()
        leftovers = kill_leftovers(tree)
        if leftovers:
            log.warning("killed %d process(es) %s left behind by %s", len(leftovers), leftovers, self.spec.name)
        return code


def temporal_spec(config: StackConfig) -> ChildSpec:
    """The Temporal dev server child, persisted to ``<home>/temporal.db``."""
    from marathon import temporal_server

    argv = temporal_server.dev_server_command(
        db_path=config.home / "temporal.db",
        port=config.temporal_port,
        ui_port=config.ui_port,
        ip=config.temporal_host,
        namespace=config.namespace,
    )
    return ChildSpec("temporal", argv, stop_grace_s=STOP_GRACE_S["temporal"], role="temporal")


def api_spec(config: StackConfig) -> ChildSpec:
    argv = [
        sys.executable, "-m", "uvicorn", "api.main:create_app", "--factory",
        "--host", config.api_host, "--port", str(config.api_port), "--log-level", "info",
    ]
    return ChildSpec("api", argv, stop_grace_s=STOP_GRACE_S["api"], role="api")


def worker_specs(config: StackConfig, gpus: list[str]) -> list[ChildSpec]:
    marathon = [sys.executable, "-m", "marathon.cli", "worker"]
    specs = [ChildSpec("worker-cpu", [*marathon, "cpu"], stop_grace_s=WORKER_STOP_GRACE_S, role="worker-cpu")]
    if gpus:
        for gpu in gpus:
            specs.append(
                ChildSpec(
                    f"worker-gpu{gpu}",
                    [*marathon, "gpu", "--device", "cuda"],
                    env={"CUDA_VISIBLE_DEVICES": gpu},
                    stop_grace_s=WORKER_STOP_GRACE_S,
                    role="evaluator",
                )
            )
    else:
        specs.append(
            ChildSpec(
                "worker-eval-cpu",
                [*marathon, "gpu", "--device", "cpu"],
                env={"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"},
                stop_grace_s=WORKER_STOP_GRACE_S,
                role="evaluator",
            )
        )
    return specs


def child_env(config: StackConfig) -> dict[str, str]:
    """What every child reads its settings from, so all of them agree on where things are.

    Each child gets only part of it: see ``role_env``."""
    ours = {
        "MARATHON_HOME": str(config.home),
        "MARATHON_API_HOST": config.api_host,
        "MARATHON_API_PORT": str(config.api_port),
        "MARATHON_TEMPORAL_ADDRESS": config.temporal_address,
        "MARATHON_TEMPORAL_NAMESPACE": config.namespace,
        "MARATHON_TEMPORAL_UI_URL": config.ui_url,
        "MARATHON_DATABASE_URL": config.database,
        "PYTHONUNBUFFERED": "1",
    }
    # The settings read names case-insensitively: a `marathon_home` left in the environment
    # must not override ours. DATABASE_URL goes too: the store's URL is MARATHON_DATABASE_URL.
    replaced = {*ours, "DATABASE_URL"}
    env = {name: value for name, value in os.environ.items() if name.upper() not in replaced}
    env.update(ours)
    return env


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
        """(task queue, "workflow"|"activity") that must have a poller before runs can start.

        The API routes a new run to the first evaluation queue that has a worker, so a run
        created before the evaluation worker polls would wait for a GPU that never comes.
        """
        from marathon.settings import get_settings

        settings = get_settings()
        # The CPU worker serves the workflows and the propose/record activities on one queue.
        queues = [(settings.cpu_task_queue, "workflow"), (settings.cpu_task_queue, "activity")]
        if not self.gpus:
            queues.append((f"{settings.gpu_task_queue_prefix}cpu", "activity"))
        else:
            archs = gpu_archs()
            for arch in sorted({archs[gpu] for gpu in self.gpus if gpu in archs}):
                queues.append((f"{settings.gpu_task_queue_prefix}{arch}", "activity"))
        return queues

    def _wait_for_pollers(self) -> None:
        import asyncio

        from temporalio.api.enums.v1 import TaskQueueType
        from temporalio.api.taskqueue.v1 import TaskQueue
        from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
        from temporalio.client import Client

        kinds = {
            "workflow": TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            "activity": TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        }
        queues = self._expected_queues()

        async def waiting_for() -> list[str]:
            client = await Client.connect(self.config.temporal_address, namespace=self.config.namespace)
            deadline = time.monotonic() + READY_TIMEOUT_S
            missing = [f"{queue} ({kind})" for queue, kind in queues]
            while time.monotonic() < deadline and not self.stopping.is_set():
                missing = []
                for queue, kind in queues:
                    request = DescribeTaskQueueRequest(
                        namespace=self.config.namespace,
                        task_queue=TaskQueue(name=queue),
                        task_queue_type=kinds[kind],
                    )
                    response = await client.workflow_service.describe_task_queue(request)
                    if not response.pollers:
                        missing.append(f"{queue} ({kind})")
                if not missing:
                    return []
                await asyncio.sleep(0.5)
            return missing

        missing = asyncio.run(waiting_for())
        if self.stopping.is_set():
            raise StackError("interrupted while waiting for the workers")
        self.not_polling = missing
        if missing:
            log.warning(
                "no worker polls %s after %.0f s: not ready; runs cannot be served until one does (see %s)",
                ", ".join(missing), READY_TIMEOUT_S, self.config.log_dir,
            )

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
        path = self.config.home / STACK_FILE_NAME
        path.write_text(json.dumps(info, indent=2) + "\n")

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
                f"Marathon started but is NOT READY (home {c.home}): no worker polls {', '.join(not_polling)} "
                f"after {READY_TIMEOUT_S:.0f} s; see {c.log_dir} and {c.api_url}/healthz",
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
                f"  Logs         {c.log_dir}/",
                token_line,
                "Press Ctrl-C to stop.",
            ]
        )

    def _adopted(self) -> list[int]:
        """Processes reparented to us (we are a subreaper): grandchildren whose parent died."""
        ours = {child.pid for child in self.children}
        me = str(os.getpid())
        adopted = []
        for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
            if entry.isdigit() and int(entry) not in ours:
                fields = _proc_stat(int(entry))
                if fields and fields[1] == me:
                    adopted.append(int(entry))
        return adopted

    def _reap_adopted(self, kill: bool = False) -> None:
        for pid in self._adopted():
            if kill:
                kill_leftovers(process_tree(pid))
                log.warning("killed orphaned process %d", pid)
            try:
                os.waitpid(pid, 0 if kill else os.WNOHANG)
            except ChildProcessError:
                pass

    def supervise(self) -> None:
        """Restart children that exit until asked to stop."""
        while not self.stopping.wait(0.5):
            self._reap_adopted()
            now = time.monotonic()
            for child in self.children:
                if child.restart_at is not None:
                    if now >= child.restart_at:
                        child.restarts += 1
                        child.start()
                        log.info("restarted %s (pid %d, restart %d)", child.spec.name, child.pid, child.restarts)
                        self._write_stack_file()
                    continue
                code = child.exited()
                if code is not None:
                    delay = child.schedule_restart(now)
                    log.warning(
                        "%s (pid %d) exited with code %d: restarting in %.0f s (see %s)",
                        child.spec.name, child.pid, code, delay, child.log_path,
                    )

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
        # Orphaned grandchildren (a judge sandbox whose worker died) are reparented to us, so
        # they can be found and stopped rather than left running.
        PR_SET_CHILD_SUBREAPER = 36
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        previous = {sig: signal.signal(sig, self._handle_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
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
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _redact(url: str) -> str:
    """A database URL without its password, for logs."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("@")[-1]
