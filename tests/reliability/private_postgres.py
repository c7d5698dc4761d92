"""A throwaway PostgreSQL cluster of the test's own, so a test may crash and restart it
without touching the machine's shared server on 5432."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Optional

from marathon.temporal_server import free_port


def _tool(name: str) -> Optional[str]:
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    return str(versions[-1]) if versions else None


def missing_reason() -> Optional[str]:
    """Why no private cluster can be made here, or None."""
    for name in ("initdb", "pg_ctl"):
        if _tool(name) is None:
            return f"{name} not found (PostgreSQL server binaries)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: initdb refuses root"
    return None


class PrivatePostgres:
    """initdb into ``folder``; ``start``/``crash``/``stop`` the postmaster on a free port."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.data = folder / "data"
        self.port = free_port("127.0.0.1")
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        # initdb and the postmaster refuse root: run them as the postgres user then.
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        return subprocess.run(prefix + list(argv), check=check, capture_output=True, text=True, timeout=60)

    def init(self) -> "PrivatePostgres":
        self.folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.folder, user="postgres")
        self._run(_tool("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        return self

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(_tool("pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.folder / "log"), "-w", "start")

    def crash(self) -> None:
        """Stop without a clean shutdown (immediate mode: the postmaster SIGQUITs its children)."""
        self._run(_tool("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def stop(self) -> None:
        self._run(_tool("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)
