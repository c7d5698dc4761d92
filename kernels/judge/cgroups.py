"""A cgroup box per judgement: the candidate's whole process tree, measured and held from outside.

The candidate owns everything inside its process (threads the guards never saw, timers,
finalizers), so what decides a verdict is read by the trusted caller from the kernel:

- ``pids``: ``pids.max`` bounds the tasks (processes and threads) of one judgement, so a
  thread storm starves only the box that started it, not the uid every sandbox shares;
- ``cpuacct``: ``cpuacct.usage`` is the CPU time of every task in the box, in nanoseconds,
  counted by the kernel: a spare thread's work is the candidate's time, and no answer of the
  candidate's process can change it;
- ``freezer``: ``FROZEN`` stops every task of the box, so nothing of the candidate runs while
  its baseline is timed (a thread burning CPU cannot slow the baseline).

cgroup v1 controllers are created under ``/sys/fs/cgroup/<controller>/marathon-judge-<id>``;
that needs root. Where a controller is missing, ``open_box`` falls back to a weaker layer and
says so in ``Box.layers`` (which goes into every report): tasks bounded only by the uid's
``RLIMIT_NPROC``, CPU time read from ``/proc`` for the sandbox's process tree (cpu_clock.py; the
caller's wall clock decides where not even that is readable), the process group
stopped with SIGSTOP instead of frozen (a process that left the group keeps running).
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from kernels.judge import cpu_clock

ROOT = "/sys/fs/cgroup"
CONTROLLERS = ("pids", "cpuacct", "freezer")
PIDS_MAX = 1024  # torch, Triton and CUDA start a few dozen threads; 1024 leaves room, not a storm
FREEZE_TIMEOUT_S = 5.0


class BoxUnavailable(RuntimeError):
    """A controller the judgement was told to require is missing; the message says which."""


def controller_dir(controller: str) -> str | None:
    """The v1 hierarchy of ``controller`` where this process may create groups, else None."""
    for name in (controller, f"cpu,{controller}" if controller == "cpuacct" else controller):
        path = os.path.join(ROOT, name)
        if os.path.isdir(path) and os.access(path, os.W_OK) and os.path.exists(os.path.join(path, "cgroup.procs")):
            return path
    return None


@dataclass
class Box:
    """One judgement's cgroups (those that could be made) and what stands in for the others."""

    name: str
    groups: dict[str, str] = field(default_factory=dict)  # controller -> its group's folder
    pgid: int | None = None  # the sandbox's first process, root of the tree the SIGSTOP fallback stops
    stopped: list[int] = field(default_factory=list)
    tree_clock: Any = None  # without cpuacct: the sandbox tree's CPU clock (cpu_clock.TreeClock)

    @property
    def layers(self) -> dict[str, str]:
        """How each resource of the box is held, for the report."""
        return {
            "tasks": f"cgroup pids.max {PIDS_MAX}" if "pids" in self.groups else
            "no pids cgroup: bounded only by the sandbox uid's RLIMIT_NPROC (shared by every sandbox)",
            "cpu_time": "cgroup cpuacct.usage (every task of the box)" if "cpuacct" in self.groups else
            "no cpuacct cgroup: /proc schedstat of the sandbox's process tree (a task keeps the time it had "
            "at the last reading before it exited; one that left the tree is not counted)" if _tree_clock() else
            "no cpuacct cgroup: the candidate's time is the caller's wall clock",
            "freeze": "cgroup freezer while the baseline is timed" if "freezer" in self.groups else
            "no freezer cgroup: the sandbox's process tree is stopped with SIGSTOP while the baseline is timed "
            "(a process that left the tree, or one the candidate continues with SIGCONT, runs on)",
        }

    def enter(self) -> None:
        """Move the calling process into every group of the box (run in the child before exec)."""
        pid = str(os.getpid()).encode()
        for folder in self.groups.values():
            fd = os.open(os.path.join(folder, "cgroup.procs"), os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def cpu_ns(self) -> int | None:
        """CPU nanoseconds used so far by every task ever in the box; without cpuacct, by the
        sandbox's process tree alive now (cpu_clock.py); None where neither can be read."""
        folder = self.groups.get("cpuacct")
        if folder is None:
            if self.pgid is None or not _tree_clock():
                return None
            if self.tree_clock is None or self.tree_clock.root != self.pgid:
                self.tree_clock = cpu_clock.TreeClock(self.pgid)
            return self.tree_clock.ns()
        with open(os.path.join(folder, "cpuacct.usage")) as handle:
            return int(handle.read().strip())

    def tasks(self) -> list[int]:
        """Every task (thread) now in the box, as host ids; [] without a cgroup."""
        folder = next(iter(self.groups.values()), None)
        if folder is None:
            return []
        with open(os.path.join(folder, "tasks")) as handle:
            return [int(line) for line in handle.read().split()]

    def freeze(self) -> str:
        """Stop every task of the box; returns the layer used ("freezer" or "sigstop")."""
        folder = self.groups.get("freezer")
        if folder is None:
            for pid in cpu_clock.process_tree(self.pgid) if self.pgid is not None else []:
                try:
                    os.kill(pid, signal.SIGSTOP)
                    self.stopped.append(pid)
                except ProcessLookupError:
                    pass
            return "sigstop"
        _write(folder, "freezer.state", "FROZEN")
        deadline = time.monotonic() + FREEZE_TIMEOUT_S
        while _read(folder, "freezer.state") != "FROZEN":
            if time.monotonic() > deadline:
                raise BoxUnavailable(f"the candidate's box did not freeze within {FREEZE_TIMEOUT_S:g} s")
            time.sleep(0.001)
        return "freezer"

    def thaw(self) -> None:
        folder = self.groups.get("freezer")
        if folder is not None:
            _write(folder, "freezer.state", "THAWED")
        else:
            for pid in self.stopped:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            self.stopped = []

    def frozen(self) -> bool:
        folder = self.groups.get("freezer")
        return folder is not None and _read(folder, "freezer.state") == "FROZEN"

    def close(self) -> None:
        """Kill whatever is left in the box and remove its groups."""
        if "freezer" in self.groups:
            try:
                self.thaw()
            except OSError:
                pass
        for _ in range(50):
            left = self.tasks()
            if not left:
                break
            for task in left:
                try:
                    os.kill(task, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        for folder in self.groups.values():
            for _ in range(50):
                try:
                    os.rmdir(folder)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # tasks still exiting
                    time.sleep(0.02)


def open_box(require: tuple[str, ...] = (), disable: tuple[str, ...] = ()) -> Box:
    """Create this judgement's groups. A controller in ``require`` that cannot be made raises
    ``BoxUnavailable``; one in ``disable`` is not used (tests of the weaker layers)."""
    box = Box(f"marathon-judge-{secrets.token_hex(6)}")
    for controller in CONTROLLERS:
        if controller in disable:
            continue
        parent = controller_dir(controller)
        if parent is None:
            continue
        folder = os.path.join(parent, box.name)
        try:
            os.mkdir(folder)
        except OSError:
            continue
        box.groups[controller] = folder
        if controller == "pids":
            _write(folder, "pids.max", str(PIDS_MAX))
    missing = [c for c in require if c not in box.groups]
    if missing:
        box.close()
        raise BoxUnavailable(
            f"cgroup v1 controller(s) {', '.join(missing)} cannot be created under {ROOT} (the judge must run as root "
            "on a host with cgroup v1 pids, cpuacct and freezer hierarchies mounted)")
    return box


def _tree_clock() -> bool:
    return cpu_clock.available()


def _write(folder: str, name: str, value: str) -> None:
    with open(os.path.join(folder, name), "w") as handle:
        handle.write(value)


def _read(folder: str, name: str) -> str:
    with open(os.path.join(folder, name)) as handle:
        return handle.read().strip()
