"""The arrows run downward: ``marathon`` (the CLI, the settings, the worker entry points) reads the
settings and passes them down; nothing below it imports it. Checked twice: every import statement
in the source (lazy ones inside functions too), and what importing every store and activity module
really loads in a fresh interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BELOW_MARATHON = ("store", "activities", "workflows", "kernels")


def marathon_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import of ``marathon`` or one of its modules in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [(node.lineno, name) for name in names if name == "marathon" or name.startswith("marathon.")]
    return found


def test_the_detector_sees_every_form_of_import():
    source = (
        "import os\nimport marathon\nfrom marathon.settings import get_settings\n"
        "def lazy():\n    import marathon.workers as w\n    from marathonic import x\n    from . import marathon\n"
    )
    assert marathon_imports(source) == [(2, "marathon"), (3, "marathon.settings"), (5, "marathon.workers")]


@pytest.mark.parametrize("package", BELOW_MARATHON)
def test_no_module_below_marathon_imports_it(package):
    files = sorted((ROOT / package).rglob("*.py"))
    assert len(files) >= 3, f"expected the {package}/ sources under {ROOT}, found {len(files)} files"
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in files
        for line, name in marathon_imports(path.read_text())
    ]
    assert offenders == [], "settings are read at the edges and passed down; " + "; ".join(offenders)


def test_loading_every_store_and_activity_module_loads_nothing_of_marathon():
    script = (
        "import importlib, pkgutil, sys\n"
        "loaded = []\n"
        "for package in ('store', 'activities'):\n"
        "    root = importlib.import_module(package)\n"
        "    for info in pkgutil.walk_packages(root.__path__, package + '.'):\n"
        "        if not info.name.startswith('store.migrations'):\n"
        "            importlib.import_module(info.name)\n"
        "            loaded.append(info.name)\n"
        "assert 'activities.propose' in loaded and 'store.db' in loaded, loaded\n"
        "print(sorted(m for m in sys.modules if m == 'marathon' or m.startswith('marathon.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_api_reaches_marathon_only_at_its_settings():
    """The CLI and the API are two faces of one service: the CLI stands on top (it may import the
    API's schemas and progress wording), the API needs nothing of the CLI's insides but the
    settings object both read at their edge."""
    files = sorted((ROOT / "api").rglob("*.py"))
    assert len(files) >= 10, f"expected the api/ sources under {ROOT}"
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in files
        for line, name in marathon_imports(path.read_text())
        if name != "marathon.settings"
    ]
    assert offenders == [], "; ".join(offenders)
