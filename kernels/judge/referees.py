"""Referees kept between judgements, so a worker warms its baselines once, not once per judgement.

A referee (``referee.py``) is trusted code only; the candidate never talks to it, and each
judgement gets a fresh ``Referee`` (plan, references, outputs) inside it. What it keeps is its
loaded baselines: FLA's compiled, autotuned kernels and torch.compile's graphs, which cost a
fresh process 5-70 s per bench shape. A ``RefereePool`` hands an idle referee to a judgement
and takes it back only when it ended cleanly (no command of the judgement left unanswered, the
judgement's tensors freed); otherwise the referee is killed, as a fresh-process referee
always was. One pool per worker process; each referee serves one judgement at a time.

    pool = RefereePool(device="cuda", keep=4)
    pool.prime(["kda", "mla-decode"], count=4)      # before the worker polls
    judge(source, "kda", referees=pool)             # many times
    pool.close()
"""

from __future__ import annotations

import atexit
import concurrent.futures
import queue
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kernels.judge.children import Child
from kernels.judge.environment import child_env

__all__ = ["RefereePool", "start_referee", "REFEREE_BOOT"]

PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
REFEREE_BOOT = "import sys; sys.path.insert(0, {root!r}); from kernels.judge.referee import main; main()"
END_TIMEOUT_S = 30.0     # a referee frees a judgement's tensors in well under a second
PRIME_TIMEOUT_S = 1800.0  # FLA compiling its kernels for every bench shape on a new node: minutes


def start_referee(workdir: str, device: str) -> Child:
    """A referee process in ``workdir`` (its HOME and TMPDIR), waiting for ``begin``."""
    argv = [sys.executable, "-I", "-c", REFEREE_BOOT.format(root=PROJECT_ROOT)]
    return Child("referee", argv, {}, child_env(workdir, device), workdir)


def end_judgement(referee: Child, timeout_s: float = END_TIMEOUT_S) -> bool:
    """Ask ``referee`` to drop its judgement; True once it said ``ended``. Only a referee with no
    command left unanswered is asked (else False): one still computing for a stopped judgement
    would use the GPU outside the lease."""
    if referee.process.poll() is not None or referee.pending() != 0:
        return False
    while True:  # replies the stopped judgement never read
        try:
            if referee.messages.get_nowait() is None:
                return False
        except queue.Empty:
            break
    referee.send({"op": "end"})
    reply = _await_reply(referee, "ended", timeout_s)
    return reply is not None and reply.get("kind") == "ended"


def _await_reply(referee: Child, kind: str, timeout_s: float) -> dict[str, Any] | None:
    """The referee's next message of ``kind`` or ``error`` within ``timeout_s`` (others are
    stale replies, dropped); None when it died first or took longer."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            message = referee.messages.get(timeout=0.2)
        except queue.Empty:
            continue
        if message is None:
            return None
        if message.get("kind") in (kind, "error"):
            return message
    return None


class RefereePool:
    """Idle referees for ``device``, at most ``keep`` of them kept; thread-safe.

    Referees are started from one long-lived thread of the pool's own: Linux kills a judge's
    child when the thread that started it exits (``protocol.die_with_parent``), and a worker's
    judgements run on threads that come and go.
    """

    def __init__(self, device: str, keep: int = 4):
        if device not in ("cpu", "cuda"):
            raise ValueError(f"a referee pool's device must be 'cpu' or 'cuda', got {device!r}")
        if keep < 1:
            raise ValueError(f"a referee pool must keep at least 1 referee, got keep={keep}")
        self.device = device
        self.keep = keep
        self._idle: list[tuple[Child, str]] = []
        self._lock = threading.Lock()
        self._starter = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="referee-starter")
        self._closed = False
        self.started = 0   # referees started (tests read it)
        atexit.register(self.close)

    def take(self) -> tuple[Child, str, bool]:
        """An idle live referee, or a new one: (referee, its workdir, whether it was kept)."""
        if self._closed:
            raise RuntimeError("this referee pool is closed")
        while True:
            with self._lock:
                entry = self._idle.pop() if self._idle else None
            if entry is None:
                break
            child, workdir = entry
            if child.process.poll() is None:
                return child, workdir, True
            _discard(child, workdir)
        workdir = tempfile.mkdtemp(prefix="marathon-referee-")
        child = self._starter.submit(start_referee, workdir, self.device).result()
        with self._lock:
            self.started += 1
        return child, workdir, False

    def give_back(self, child: Child, workdir: str) -> bool:
        """Keep ``child`` for the next judgement if it ends its judgement cleanly and there is
        room; otherwise kill it. True when kept."""
        kept = False
        if not self._closed and end_judgement(child):
            with self._lock:
                if len(self._idle) < self.keep:
                    self._idle.append((child, workdir))
                    kept = True
        if not kept:
            _discard(child, workdir)
        return kept

    def prime(self, problems: list[str], count: int = 1, lease_path: str | None = None,
              timeout_s: float = PRIME_TIMEOUT_S) -> list[dict[str, Any]]:
        """Start ``count`` referees (at most ``keep``) and warm each problem's baseline in every
        one at its bench shapes. The first referee warms alone, filling the on-disk caches (FLA
        compiles for minutes on a new node); the others then load from them, at once. Returns
        the first referee's records (seconds per problem and shape, or errors) and one summary
        record per other referee."""
        count = max(1, min(count, self.keep))
        records = self._prime_one(problems, lease_path, timeout_s)
        if count > 1:
            with concurrent.futures.ThreadPoolExecutor(max_workers=count - 1) as executor:
                others = list(executor.map(lambda _: self._prime_one(problems, lease_path, timeout_s),
                                           range(count - 1)))
            for index, found in enumerate(others, 2):
                errors = [r for r in found if "error" in r]
                seconds = sum(r.get("seconds", 0.0) for r in found)
                records.append({"referee": index, "seconds": round(seconds, 3),
                                **({"error": errors[0]["error"]} if errors else {})})
        return records

    def _prime_one(self, problems: list[str], lease_path: str | None, timeout_s: float) -> list[dict[str, Any]]:
        child, workdir, _ = self.take()
        child.send({"op": "prime", "problems": list(problems), "device": self.device, "lease_path": lease_path})
        reply = _await_reply(child, "primed", timeout_s)
        if reply is not None and reply.get("kind") == "primed":
            self.give_back(child, workdir)
            return list(reply.get("records", []))
        timed_out = reply is None and child.process.poll() is None
        _discard(child, workdir)
        if timed_out:
            return [{"error": f"the baselines' warm-up did not finish within {timeout_s:.0f} s"}]
        detail = (reply or {}).get("message") or child.capture.text()[-500:]
        return [{"error": f"the referee failed while warming the baselines: {detail}"}]

    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    def close(self) -> None:
        """Kill every idle referee (those serving a judgement are killed by it)."""
        self._closed = True
        with self._lock:
            idle, self._idle = self._idle, []
        for child, workdir in idle:
            _discard(child, workdir)
        self._starter.shutdown(wait=False)


def _discard(child: Child, workdir: str) -> None:
    child.kill()
    shutil.rmtree(workdir, ignore_errors=True)
