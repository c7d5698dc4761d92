"""The house rules a reader relies on, checked over every source file: no function over 80 lines,
no file over 400 lines outside the kernels themselves (``kernels/<problem>/``, where a Triton
file keeps its kernels, launcher and public function together), and no module importing another
module's private names (a ``_name`` is its module's own; what two modules share gets a public
name in the module that owns it)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("api", "marathon", "activities", "workflows", "store", "kernels")
MAX_FUNCTION_LINES = 80
MAX_FILE_LINES = 400
# The problem folders hold the kernels themselves, sized by what one Triton file must hold.
KERNEL_FOLDERS = ("kernels/kda/", "kernels/mla/")


def sources() -> list[tuple[str, str]]:
    """(path relative to the repository, text) of every Python source under the packages."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if "/migrations/" not in relative:
                found.append((relative, path.read_text()))
    return found


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(name, lines) of each function or method of ``source`` longer than ``limit`` lines,
    decorators included."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            lines = node.end_lineno - first + 1
            if lines > limit:
                found.append((node.name, lines))
    return found


def private_imports(source: str) -> list[tuple[int, str]]:
    """(line, "module._name") of each ``from <our module> import _name`` in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] not in PACKAGES:
                continue
            found += [
                (node.lineno, f"{node.module}.{alias.name}")
                for alias in node.names
                if alias.name.startswith("_") and not alias.name.startswith("__")
            ]
    return found


def test_the_detectors_see_what_they_look_for():
    body = "\n".join(f"    x = {i}" for i in range(80))
    source = f"@decorator\ndef long():\n{body}\n\ndef short():\n    pass\n"
    assert long_functions(source) == [("long", 82)]
    assert long_functions(source, limit=82) == []
    imports = "from api.launch import launch, _private\nfrom os import _exit\nfrom . import _x\n"
    assert private_imports(imports) == [(1, "api.launch._private")]


def test_the_sources_are_found():
    paths = [path for path, _ in sources()]
    assert len(paths) > 100, f"expected the sources under {ROOT}, found {len(paths)}"
    assert "api/routes/runs.py" in paths and "kernels/judge/referee.py" in paths


def test_no_function_is_over_80_lines():
    offenders = [
        f"{path}: {name} has {lines} lines"
        for path, text in sources()
        if not path.startswith(KERNEL_FOLDERS)
        for name, lines in long_functions(text)
    ]
    assert offenders == [], "split these (behaviour unchanged): " + "; ".join(offenders)


def test_no_file_outside_the_kernels_is_over_400_lines():
    offenders = [
        f"{path}: {len(text.splitlines())} lines"
        for path, text in sources()
        if not path.startswith(KERNEL_FOLDERS)
        and len(text.splitlines()) > MAX_FILE_LINES
    ]
    assert offenders == [], "split these by role: " + "; ".join(offenders)


# Triton files of one kernel family share their device helpers (``@triton.jit`` functions).
KERNEL_FILES = ("kernels/mla/paged.py",)


def test_no_module_imports_another_modules_private_names():
    offenders = [
        f"{path}:{line} imports {name}"
        for path, text in sources()
        if path not in KERNEL_FILES
        for line, name in private_imports(text)
    ]
    assert offenders == [], "give what is shared a public name in its owner: " + "; ".join(offenders)
