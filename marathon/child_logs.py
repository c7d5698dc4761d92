"""Why a child of ``marathon up`` is not working, read from its log: the last error line of its
latest start and, for the failures a newcomer meets, the fix. The supervisor's banner says this
instead of only "not ready"."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

# Each start of a child writes this marker line first (``marathon.processes.Child.start``).
START_MARKER = "--- "
TAIL_BYTES = 64 * 1024
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d[ T][\d:,.]+\s+")
_ERROR = re.compile(r"(\bERROR\b|\bCRITICAL\b|Error\b|Exception\b|\berror:|\brefusing\b)")

# (what the error line says, what to do); the first match wins.
KNOWN_FIXES: tuple[tuple[str, str], ...] = (
    ("bubblewrap (bwrap) is not installed",
     "install it: ./scripts/setup-system demo (as root or with sudo), or: sudo apt-get install -y bubblewrap"),
    ("setpriv (util-linux) is missing", "install it: sudo apt-get install -y util-linux"),
    ("bubblewrap could not start a sandbox",
     "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1) or run as root"),
    ("No module named", "install the missing package into Marathon's virtual environment and restart"),
    ("address already in use", "stop what holds the port, or pass another port to `marathon up`"),
)


@dataclass
class ChildTrouble:
    """What went wrong with one child: its last error line and, when known, the fix."""

    name: str
    error: str
    fix: str = ""

    def lines(self) -> list[str]:
        lines = [f"  {self.name}: {self.error}"]
        if self.fix:
            lines.append(f"  {'':{len(self.name)}}  fix: {self.fix}")
        return lines


def latest_start(log_path: Path) -> str:
    """The text the child wrote since its latest start (the log's tail when that is long)."""
    try:
        with open(log_path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - TAIL_BYTES))
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    marker = text.rfind("\n" + START_MARKER)
    return text[marker + 1:] if marker >= 0 else text


def last_error_line(text: str) -> str:
    """The last line that reads like an error (a log record at ERROR, an exception's last line);
    else the last non-empty line; "" for no text."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith(START_MARKER)]
    for line in reversed(lines):
        if _ERROR.search(line):
            return _TIMESTAMP.sub("", line)
    return _TIMESTAMP.sub("", lines[-1]) if lines else ""


def fix_for(error: str) -> str:
    for needle, fix in KNOWN_FIXES:
        if needle in error:
            return fix
    return ""


def diagnose(name: str, log_path: Optional[Path], exit_code: Optional[int]) -> ChildTrouble:
    """Why child ``name`` is not polling: its log's last error line and the fix, else its exit
    code (None: it is still running) and where its log is."""
    error = last_error_line(latest_start(log_path)) if log_path is not None else ""
    if not error:
        error = f"exited with code {exit_code}" if exit_code is not None else "running, but not polling yet"
        if log_path is not None:
            error += f"; see {log_path}"
    return ChildTrouble(name=name, error=error[:400], fix=fix_for(error))


def explained_by_crashes(missing: list[str], crashed: set[str], cpu_queue: str) -> bool:
    """Whether every queue nobody polls (``"<queue> (<kind>)"``) belongs to a worker that has
    exited (names in ``crashed``): the CPU queue to ``worker-cpu``, an evaluation queue to an
    evaluation worker. Until then the others may still be starting: wait for them."""
    evaluators_crashed = bool(crashed - {"worker-cpu"})
    return bool(crashed) and all(
        ("worker-cpu" in crashed) if name.startswith(f"{cpu_queue} (") else evaluators_crashed for name in missing
    )
