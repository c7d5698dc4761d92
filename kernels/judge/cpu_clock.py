"""The CPU time a process tree has used, read from outside it: the judge's clock in CPU mode.

On a shared CPU a timed call waits for a core as long as the scheduler decides: one 40 ms
interpreter call took 14 to 76 ms of wall time on a loaded 2-core machine, so wall-clock
speedups of one kernel swung several-fold between judgements. CPU mode therefore reports each
call's CPU time (kernels/timing.py: the calling thread's), and the judge checks what a batch
reports against this clock: the kernel's own count (``/proc/<pid>/task/<tid>/schedstat``, ns
on a core) of every thread of every process under the sandbox's top process, which the
candidate can neither stop nor forge. Work a candidate does between its timed calls shows here
and not in its reported times, as on a GPU it shows on the wall clock and not in its events.
"""

from __future__ import annotations

import os


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as handle:
                found += [int(child) for child in handle.read().split()]
        except (OSError, ValueError):
            continue
    return found


def _run_ns(pid: int) -> int:
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as handle:
                total += int(handle.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total


def tree_cpu_ms(pid: int) -> float:
    """Milliseconds on a CPU so far of ``pid``, its threads and all its descendants (alive
    now: a child that has exited is not counted, and a candidate may not start any)."""
    total, pending, seen = 0, [pid], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        total += _run_ns(current)
        pending += _children(current)
    return total / 1e6


def child_cpu_ms(child, device: str) -> float | None:
    """CPU mode: ``tree_cpu_ms`` of a judge's child process (kernels/judge/children.py); None on a GPU."""
    return None if device == "cuda" else tree_cpu_ms(child.process.pid)


def available() -> bool:
    """Whether this kernel exposes what ``tree_cpu_ms`` reads (Linux with schedstat and children)."""
    me = os.getpid()
    return os.path.exists(f"/proc/{me}/task/{me}/schedstat") and os.path.exists(f"/proc/{me}/task/{me}/children")
