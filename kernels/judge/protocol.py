"""How the judge's processes talk: nonce-framed JSON lines on a dedicated pipe.

The parent gives each child a pipe and a random nonce. Only lines that start with the nonce
count; the candidate's stdout and stderr are captured separately, size-capped, and never
parsed, so printing a fake report does nothing. A child that exits without its final line
(``exit(0)`` included) has produced no verdict.

Outputs cross on the same pipe: a message with ``"nbytes": n`` is followed by exactly ``n``
raw bytes. The reader refuses a size above the bound its owner set before reading any of
them, so the trusted side never opens a path, a descriptor or an object the candidate names.
"""

from __future__ import annotations

import json
import os
from typing import Any

MAX_LINE_BYTES = 64 * 1024 * 1024


def send(fd: int, nonce: str, message: dict[str, Any], payload: bytes | memoryview | None = None) -> None:
    """One framed message, and ``payload``'s raw bytes after it (announced as ``nbytes``)."""
    if payload is not None:
        message = dict(message, nbytes=len(payload))
    data = (nonce + " " + json.dumps(message) + "\n").encode()
    if payload is not None:
        data += bytes(payload)
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def parse(line: bytes, nonce: str) -> dict[str, Any] | None:
    """The message in ``line`` if it carries the nonce, else None."""
    prefix = (nonce + " ").encode()
    if not line.startswith(prefix):
        return None
    try:
        message = json.loads(line[len(prefix):])
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this child when the process (thread) that started it dies.

    The judge's children run in their own session so a timeout can kill their whole group;
    without this, a hung candidate would outlive a worker that crashed mid-judgement.
    Called by the trusted start-up code of each child, before any candidate code exists.
    """
    import ctypes
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
