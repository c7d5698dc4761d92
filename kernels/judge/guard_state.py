"""The guards' shared state inside the sandbox process, and the frame lookups they make.

Split from ``guards.py`` so that each guard (imports and module attributes in ``module_guard.py``,
files in ``file_guard.py``, the audit hook, torch dispatch and Triton launches in ``guards.py``)
reads and records violations in one place.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

class PolicyViolation(RuntimeError):
    """Raised (after being recorded) when a candidate does something it may not."""


@dataclass
class GuardState:
    candidate_file: str = ""
    active: bool = False
    launching: int = 0
    violations: list[str] = field(default_factory=list)
    own_launches: int = 0
    kernels: dict[str, dict[str, Any]] = field(default_factory=dict)
    allow_exec: int = 0
    writable_root: str = ""  # the sandbox's directory (HOME and TMPDIR); "" = no file checks

    def violate(self, message: str) -> PolicyViolation:
        if message not in self.violations:
            self.violations.append(message)
        return PolicyViolation(message)


STATE = GuardState()

own_frame_lookup = [0]  # > 0 while the guards themselves call sys._getframe (its audit event is theirs)


def frame(depth: int):
    """The frame ``depth`` levels above the caller, without the lookup counting as the candidate's."""
    own_frame_lookup[0] += 1
    try:
        return sys._getframe(depth + 1)
    except ValueError:
        return None
    finally:
        own_frame_lookup[0] -= 1



def frame_file(frame) -> str:
    if frame is None:
        return ""
    own_frame_lookup[0] += 1
    try:
        return frame.f_code.co_filename
    finally:
        own_frame_lookup[0] -= 1
