"""The CPU time of a process tree, read from outside it: the judge's CPU clock where no
cpuacct cgroup can be made (kernels/judge/cgroups.py ``Box.cpu_ns`` falls back to it).

With a cpuacct cgroup the kernel counts every task ever in the judgement's box, and that
decides. Without one (not root, no cgroup v1), the wall clock would be the next choice, and on
a shared CPU a timed call waits for a core as long as the scheduler decides (one 40 ms
interpreter call took 14 to 76 ms of wall time on a loaded 2-core machine: speedups swung
several-fold between judgements). This reads instead the kernel's own count of time on a core
(``/proc/<pid>/task/<tid>/schedstat``, ns) of every thread of every process under the
sandbox's first process, which the candidate can neither stop nor forge. Weaker than the
cgroup: a thread or process keeps only the time it had at the last reading before it exited
(one born and gone between two readings is not counted), and one that left the tree is not
counted at all (the first layer refuses threads and processes).
"""

from __future__ import annotations

import os


def process_tree(root: int) -> list[int]:
    """``root`` and every process below it (``/proc/<pid>/task/<tid>/children``), parents first."""
    tree, queue = [], [root]
    while queue:
        pid = queue.pop(0)
        tree.append(pid)
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children") as handle:
                    queue += [int(child) for child in handle.read().split()]
            except OSError:
                pass
    return tree


def _threads_ns(pid: int) -> dict[int, int]:
    """Each thread of ``pid``: its nanoseconds on a CPU so far."""
    found: dict[int, int] = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as handle:
                found[int(tid)] = int(handle.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return found


class TreeClock:
    """CPU nanoseconds of the tree under ``root`` that never go backwards: a thread that exited
    keeps the time it had at the last reading (a sum of the live threads alone would fall when
    one exits, and a falling clock is a speedup for free)."""

    def __init__(self, root: int):
        self.root = root
        self.last: dict[int, int] = {}
        self.retired = 0

    def ns(self) -> int:
        live: dict[int, int] = {}
        for pid in set(process_tree(self.root)):
            live.update(_threads_ns(pid))
        for tid, before in self.last.items():
            if live.get(tid, -1) < before:  # exited (or its id reused by a newer thread)
                self.retired += before
        self.last = live
        return self.retired + sum(live.values())


def available() -> bool:
    """Whether this kernel exposes what ``TreeClock`` reads (Linux with schedstat and children)."""
    me = os.getpid()
    return os.path.exists(f"/proc/{me}/task/{me}/schedstat") and os.path.exists(f"/proc/{me}/task/{me}/children")
