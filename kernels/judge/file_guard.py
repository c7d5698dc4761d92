"""The file guard: a candidate writes (and torch reads) files only inside its sandbox directory.

Python raises audit events for ``open`` and for path changes (``os.mkdir``, ``os.chmod``, …);
the audit hook in ``guards.py`` hands them here outside Triton launches, whose compiler writes its
own cache. torch's C++ file readers and writers raise no audit event: their Python entry points
are wrapped to check the path on the way in.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from kernels.judge.guard_state import STATE

# Audit events that change a file or directory, with the index of the path among their arguments.
# Outside a Triton launch (whose compiler writes its cache) they may touch only the sandbox's own
# directory: a candidate may not plant files in the shared Triton cache or anywhere else.
WRITE_EVENTS = {"os.mkdir": 0, "os.truncate": 0, "os.chmod": 0, "os.chown": 0, "os.utime": 0}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def check_write(event: str, args: tuple) -> None:
    """Refuse a write (an ``open`` for writing, or a change to a path) outside the sandbox."""
    if not STATE.writable_root or not args:
        return
    if event == "open":
        mode = args[1] if len(args) > 1 else None
        flags = args[2] if len(args) > 2 else 0
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & WRITE_FLAGS
        )
        if not writes:
            return
        path = args[0]
    else:
        path = args[WRITE_EVENTS[event]]
    check_path(event, path)


def check_path(what: str, path: Any, access: str = "writing") -> None:
    """Refuse ``what`` on ``path`` unless the path lies inside the sandbox's directory."""
    if not STATE.writable_root or isinstance(path, int) or path is None:
        return  # an already open descriptor: its opening was checked
    if not isinstance(path, (str, bytes, os.PathLike)):
        return  # a file object: opened through ``open``, which the audit hook checked
    try:
        where = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        where = str(path)
    root = STATE.writable_root
    if where == root or where.startswith(root + os.sep) or where == os.devnull:
        return
    verb = "write" if access == "writing" else "read"
    raise STATE.violate(
        f"refused at run time: {what} of {where} for {access} (a candidate may {verb} "
        "files only inside its sandbox directory)"
    )


def guard_torch_files() -> None:
    """torch reads and writes files from C++, where no audit event fires: check the path on the
    way in. A kernel has no use for files, and the worker's user may own secrets on disk.

    Covers ``torch.save`` and ``torch.load`` (every zip writer and reader:
    ``torch._C.PyTorchFileWriter``/``PyTorchFileReader``) and storages mapped from a file
    (``torch.from_file``, ``UntypedStorage.from_file``; with ``shared=True`` writes go back).
    """

    def checked_class(base, what, access):
        class Checked(base):
            def __init__(self, file, *args, **kwargs):
                if STATE.active and not STATE.launching:
                    check_path(what, file, access)
                super().__init__(file, *args, **kwargs)

        Checked.__name__ = Checked.__qualname__ = base.__name__
        return Checked

    torch._C.PyTorchFileWriter = checked_class(torch._C.PyTorchFileWriter, "torch file writer", "writing")
    torch._C.PyTorchFileReader = checked_class(torch._C.PyTorchFileReader, "torch file reader", "reading")

    def checked_from_file(from_file, what):
        def from_file_checked(filename, shared=None, *args, **kwargs):
            if STATE.active and not STATE.launching:
                check_path(what, filename, "writing" if shared else "reading")
            return from_file(filename, shared, *args, **kwargs)

        return from_file_checked

    torch.from_file = checked_from_file(torch.from_file, "torch.from_file")
    storage_from_file = torch.UntypedStorage.from_file
    torch.UntypedStorage.from_file = staticmethod(checked_from_file(storage_from_file, "UntypedStorage.from_file"))
