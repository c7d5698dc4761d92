"""The stack's child processes: how one is started (in its own session, dying with its parent,
with only the secrets its role uses), restarted after a crash (exponential backoff) and stopped
(its process group, then whatever it left behind in other sessions), read through /proc.

Used by ``marathon up`` (``marathon.devstack``), by the GPU node supervisor (``marathon worker
gpus``, ``marathon.gpu_node``) and, for the secret policy, by a GPU worker started by hand
(``marathon worker gpu``).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional

from marathon.child_logs import diagnose

# The supervisor's logger: what happens to a child is part of `marathon up`'s log.
log = logging.getLogger("marathon.up")

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
# A child that stayed up this long is healthy again: its next crash restarts it at once.
STABLE_AFTER_S = 60.0


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
# - Temporal's mTLS client files (MARATHON_TEMPORAL_TLS_CERT/_KEY/_CA: paths, not the key
#   itself) go to every role that connects to Temporal (api, worker-cpu, evaluator): a GPU node
#   that joins a cluster over mTLS cannot poll without them. The judge's sandbox sees neither
#   the variables nor the files (kernels/judge/isolation.py binds /usr and the candidate only).
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
TEMPORAL_TLS_ENV_PREFIX = "MARATHON_TEMPORAL_TLS_"
PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
_URL_WITH_PASSWORD = re.compile(r"^[a-z][a-z0-9+.-]*://[^/@\s:]*:[^/@\s]*@", re.IGNORECASE)

GRANTS: dict[str, Callable[[str], bool]] = {
    "store": lambda name: name in STORE_ENV or name in LIBPQ_SECRET_ENV,
    "llm": lambda name: name.startswith(LLM_ENV_PREFIX) or name in PROXY_ENV,
    "temporal-tls": lambda name: name.startswith(TEMPORAL_TLS_ENV_PREFIX),
}
ROLE_GRANTS: dict[str, tuple[str, ...]] = {
    "temporal": (),
    "api": ("store", "temporal-tls"),
    "worker-cpu": ("store", "llm", "temporal-tls"),
    "evaluator": ("store", "temporal-tls"),
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


def become_subreaper() -> None:
    """Have orphaned descendants (a judge's sandbox whose worker died) reparented to this process
    rather than to init, so they can be found (``adopted``) and stopped rather than left running."""
    PR_SET_CHILD_SUBREAPER = 36
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


@contextlib.contextmanager
def supervising(on_signal: Callable[[int, Any], None]) -> Iterator[None]:
    """A supervisor's lifetime: orphaned grandchildren (a judge's sandbox whose worker died) are
    reparented to this process, so they can be found and stopped rather than left running, and
    SIGINT/SIGTERM call ``on_signal`` until the block ends (the previous handlers come back)."""
    become_subreaper()
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def adopted(own_children: set[int]) -> list[int]:
    """Processes reparented to this one (a subreaper) that are not among ``own_children``:
    grandchildren whose parent died."""
    me = str(os.getpid())
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit() and int(entry) not in own_children:
            fields = _proc_stat(int(entry))
            if fields and fields[1] == me:
                found.append(int(entry))
    return found


def reap_adopted(own_children: set[int], kill: bool = False) -> None:
    """Collect the exit status of adopted processes that ended (so no zombie stays); with
    ``kill``, kill each adopted process and what it started first, and wait for it."""
    for pid in adopted(own_children):
        if kill:
            kill_leftovers(process_tree(pid))
            log.warning("killed orphaned process %d", pid)
        try:
            os.waitpid(pid, 0 if kill else os.WNOHANG)
        except ChildProcessError:
            pass


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGTERM it when the supervisor dies."""
    PR_SET_PDEATHSIG = 1
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Child:
    """One supervised process and its restart bookkeeping."""

    def __init__(self, spec: ChildSpec, log_dir: Optional[Path], base_env: dict[str, str]):
        self.spec = spec
        # None: the child writes to the supervisor's own stdout/stderr (a container's log).
        self.log_path = log_dir / f"{spec.name}.log" if log_dir is not None else None
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
        if self.log_path is None:
            self.process = self._popen(None)
        else:
            with open(self.log_path, "ab") as log_file:
                started = time.strftime("%Y-%m-%d %H:%M:%S")
                log_file.write(f"\n--- {started} starting: {' '.join(self.spec.argv)}\n".encode())
                log_file.flush()
                self.process = self._popen(log_file)
        self.started_at = time.monotonic()
        self.restart_at = None

    def _popen(self, log_file) -> subprocess.Popen:
        return subprocess.Popen(
            self.spec.argv,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT if log_file is not None else None,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )

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



def tend(children: list[Child], now: float) -> list[Child]:
    """One supervision step (``now``: ``time.monotonic()``): restart the children whose backoff
    is over and schedule a restart for those that exited. Returns the children restarted, so
    the caller can rewrite what it publishes about them (their pids)."""
    restarted = []
    for child in children:
        if child.restart_at is not None:
            if now >= child.restart_at:
                child.restarts += 1
                child.start()
                log.info("restarted %s (pid %d, restart %d)", child.spec.name, child.pid, child.restarts)
                restarted.append(child)
            continue
        code = child.exited()
        if code is not None:
            delay = child.schedule_restart(now)
            trouble = diagnose(child.spec.name, child.log_path, code)
            log.warning(
                "%s (pid %d) exited with code %d: restarting in %.0f s: %s%s",
                child.spec.name, child.pid, code, delay, trouble.error,
                f" (fix: {trouble.fix})" if trouble.fix else "",
            )
    return restarted
