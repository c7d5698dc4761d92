"""This checkout's problem entry points, installed the way pip installs them.

The shared test environment may hold an editable install made before pyproject.toml declared
its ``marathon.problems`` entry points, so the tests stage this checkout's declaration as a
distribution of its own (a ``.dist-info`` folder with ``entry_points.txt``, which is all
``importlib.metadata`` reads) plus the example's package folder, and put both on the path:
in this process (``install_here``) or in a child's PYTHONPATH (``pythonpath``). A fresh
``pip install -e .`` declares the same entry points; the registry accepts a name declared
twice with the same value.
"""

from __future__ import annotations

import importlib
import os
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_ROOT = REPO / "examples" / "rmsnorm_residual"
GROUP = "marathon.problems"


def declared_entry_points() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return dict(project["entry-points"][GROUP])


def stage(folder: Path, entry_points: dict[str, str] | None = None, name: str = "marathon_checkout") -> Path:
    """Write ``<name>-0.dist-info`` under ``folder`` declaring ``entry_points`` (default: this
    checkout's) in the ``marathon.problems`` group; returns ``folder``."""
    info = folder / f"{name}-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0\n")
    points = declared_entry_points() if entry_points is None else entry_points
    lines = [f"[{GROUP}]"] + [f"{key} = {value}" for key, value in points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return folder


def pythonpath(folder: Path) -> str:
    """PYTHONPATH for a child process: this checkout, the example's package, the staged metadata."""
    parts = [str(REPO), str(EXAMPLE_ROOT), str(stage(folder))]
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(parts)


def install_here(
    folder: Path, entry_points: dict[str, str] | None = None, name: str = "marathon_checkout"
) -> list[str]:
    """Stage and put on this process's sys.path; returns the entries added (for ``uninstall_here``)."""
    added = [p for p in (str(EXAMPLE_ROOT), str(stage(folder, entry_points, name))) if p not in sys.path]
    sys.path.extend(added)
    importlib.invalidate_caches()
    return added


def uninstall_here(added: list[str]) -> None:
    for path in added:
        if path in sys.path:
            sys.path.remove(path)
    importlib.invalidate_caches()
