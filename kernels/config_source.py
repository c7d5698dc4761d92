"""The ``CONFIG = {...}`` literal that a kernel module keeps its knobs in.

A problem's search space reads the default knobs from that literal and renders a candidate by
rewriting it, so a candidate is the kernel module itself with other knobs.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable

CONFIG_PATTERN = re.compile(r"^CONFIG = \{\n.*?^\}\n", re.MULTILINE | re.DOTALL)


def read_config(source: str, filename: str) -> dict[str, Any]:
    """The knobs of the ``CONFIG`` literal in ``source`` (the text of ``filename``)."""
    match = CONFIG_PATTERN.search(source)
    if not match:
        raise ValueError(f"{filename} has no 'CONFIG = {{...}}' literal at the start of a line")
    return ast.literal_eval(match.group(0).split("=", 1)[1].strip())


def write_config(source: str, filename: str, point: dict[str, Any], knobs: Iterable[str]) -> str:
    """``source`` with its ``CONFIG`` literal replaced by ``point`` (keys in ``knobs`` order)."""
    if not CONFIG_PATTERN.search(source):
        raise ValueError(f"{filename} has no 'CONFIG = {{...}}' literal at the start of a line")
    lines = [f"    {name!r}: {point[name]!r},".replace("'", '"') for name in knobs]
    literal = "CONFIG = {\n" + "\n".join(lines) + "\n}\n"
    return CONFIG_PATTERN.sub(lambda _: literal, source, count=1)


def knob_problems(point: dict[str, Any], space: dict[str, tuple]) -> list[str]:
    """Why ``point`` is not a point of ``space`` (knob name -> allowed values); empty when it is.

    Only membership: a problem's own ``validate`` adds its resource limits on top.
    """
    problems = []
    missing = sorted(set(space) - set(point))
    unknown = sorted(set(point) - set(space))
    if missing:
        problems.append(f"missing knobs: {missing}")
    if unknown:
        problems.append(f"unknown knobs: {unknown}")
    for name, allowed in space.items():
        if name in point and point[name] not in allowed:
            problems.append(f"{name}={point[name]!r} is not one of {list(allowed)}")
    return problems


def describe_point(point: dict[str, Any], knobs: Iterable[str]) -> str:
    """One line in the knobs' own names, in ``knobs`` order (what a hint uses): ``chunk=32 num_warps=4``."""
    return " ".join(f"{knob}={point[knob]}" for knob in knobs)


def render_point(problem: str, template: Path, point: dict[str, Any], knobs: Iterable[str],
                 validate: Callable[[dict[str, Any]], list[str]]) -> str:
    """The kernel module ``template`` with its ``CONFIG`` set to ``point``; raises ValueError naming
    ``problem`` and every reason when ``validate`` finds the point invalid."""
    problems = validate(point)
    if problems:
        raise ValueError(f"invalid {problem} point: " + "; ".join(problems))
    return write_config(template.read_text(), template.name, point, knobs)


def import_source(source: str, name: str, folder: str | Path) -> ModuleType:
    """Write ``source`` (e.g. a rendered point) to ``folder/name.py`` and import it as module
    ``name`` in this process. A file, not an in-memory module: Triton reads each kernel's source
    from the file it was defined in. Not for candidates from elsewhere: the judge runs those."""
    if not name.isidentifier():
        raise ValueError(f"module name must be a Python identifier, got {name!r}")
    path = Path(folder) / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def splice(base: str, base_entry: str, extension: Path, imports_end: str, bridge: str, entry: str) -> str:
    """One standalone candidate from two kernel modules: ``base`` (a rendered kernel module
    ending with its ``kernel`` entry ``base_entry``, which is dropped), ``bridge`` (lines binding
    names the extension imported from the base), the text of ``extension`` after its last
    import line ``imports_end`` (its docstring kept as comments), and ``entry`` (the new
    ``kernel``). Raises ValueError naming what moved when either file lost the shape spliced."""
    if not base.endswith(base_entry):
        raise ValueError(f"the base kernel module no longer ends with {base_entry.strip()!r}")
    head, found, body = extension.read_text().partition(imports_end)
    if not found:
        raise ValueError(f"{extension.name} no longer has the import line {imports_end.strip()!r}")
    docstring = head.split('"""')[1] if head.startswith('"""') else ""
    notes = "\n".join("# " + line if line else "#" for line in docstring.strip().splitlines())
    return (base[: -len(base_entry)] + f"\n\n# ---- {extension.name} ----\n" + notes + "\n" + bridge + body
            + entry)
