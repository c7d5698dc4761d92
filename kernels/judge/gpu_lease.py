"""The per-GPU lease: many judgements share a GPU, only timing holds it alone.

A GPU worker may run several judgements at once (``MARATHON_EVALUATIONS_PER_GPU``): their
compiles, correctness checks and references overlap, and each candidate's timed batches
(interleaved with the baseline's) run with nothing else on the GPU. The lease is a
readers-writer lock on two files, shared by every process of this machine that uses the
same GPU (the lease path names the GPU):

- ``shared()``: any GPU work that is not timing (a checked call, a warm-up, references);
  many holders at once.
- ``exclusive()``: timing. It waits for the current shared holders to finish their command
  and keeps new ones out until it is released.

Writers come first: a writer takes the turnstile file exclusively before it waits for the
readers, and a reader passes the turnstile (shared) before it takes the lock, so a stream of
checks cannot starve a candidate that waits to be timed. ``flock`` locks belong to an open
file description, so two judgements in one process (a worker's threads) exclude each other
just as two processes do, and a killed process drops its locks with its descriptors.

Waits poll (non-blocking ``flock`` every few milliseconds) so that the caller can keep its
heartbeat and honour its cancel event while it waits; ``waited_s`` says how long it waited.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from typing import Callable, Iterator

POLL_S = 0.005


class LeaseCancelled(Exception):
    """The caller's ``should_stop`` said stop while waiting for the GPU."""


class GpuLease:
    """Readers-writer lease on one GPU, named by ``path`` (``path`` and ``path + ".turnstile"``)."""

    def __init__(self, path: str, on_wait: Callable[[], None] | None = None,
                 should_stop: Callable[[], bool] | None = None) -> None:
        if not path:
            raise ValueError("a GPU lease needs a file path, got an empty one")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise ValueError(f"the GPU lease's folder {folder} does not exist: create it or choose another path")
        self.path = path
        self.on_wait = on_wait
        self.should_stop = should_stop
        self.waited_s = 0.0

    def _open(self, suffix: str) -> int:
        # 0o666: workers of different users on one node share the lease.
        fd = os.open(self.path + suffix, os.O_RDWR | os.O_CREAT, 0o666)
        return fd

    def _acquire(self, fd: int, mode: int) -> None:
        started = time.monotonic()
        try:
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    return
                except BlockingIOError:
                    pass
                if self.should_stop is not None and self.should_stop():
                    raise LeaseCancelled("stopped while waiting for the GPU lease")
                if self.on_wait is not None:
                    self.on_wait()
                time.sleep(POLL_S)
        finally:
            self.waited_s += time.monotonic() - started

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Hold the GPU together with other non-timing work."""
        turnstile, lock = self._open(".turnstile"), self._open("")
        try:
            self._acquire(turnstile, fcntl.LOCK_SH)
            try:
                self._acquire(lock, fcntl.LOCK_SH)
            finally:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
            yield
        finally:
            os.close(lock)  # closing drops the lock
            os.close(turnstile)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the GPU alone (timing)."""
        turnstile, lock = self._open(".turnstile"), self._open("")
        try:
            self._acquire(turnstile, fcntl.LOCK_EX)
            self._acquire(lock, fcntl.LOCK_EX)
            yield
        finally:
            os.close(lock)
            os.close(turnstile)


@contextlib.contextmanager
def maybe(lease: GpuLease | None, exclusive: bool) -> Iterator[None]:
    """``lease.exclusive()`` / ``lease.shared()``, or nothing without a lease (CPU judgements)."""
    if lease is None:
        yield
    elif exclusive:
        with lease.exclusive():
            yield
    else:
        with lease.shared():
            yield
