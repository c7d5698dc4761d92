"""The census: every kernel of a census session, listed by Nsight Compute from a trusted parent,
identified positively and timed per window. Pure functions: no torch, no process.

A census session (``census_run.py``) runs the candidate's sandbox once more under ``ncu``, with
the harness marking windows by launching its own marker kernel (``MARK_KERNEL``) with a grid
that encodes a code the caller drew in secret for that window (``Window.open``/``close``):
- *blank* windows, before the candidate is loaded (nothing of it has run: trusted), where the
  harness makes whole calls with a stand-in for the candidate: the kernels seen there are the
  harness's own, and their multiset per call is what each timed call is expected to launch;
- *timed* windows: one batch of calls on fresh secret seeds per bench shape.

What the census decides (``analyze``):
- every kernel after the candidate was loaded (warm-up and autotuning included) is either the
  harness's (a name seen in a blank window, or a fill or copy kernel of ``HARNESS_FUNCTORS``,
  which Triton's autotuner and the allowed ``copy_`` launch), or one of the candidate's own
  ``@triton.jit`` functions (``jit_names``, from its source); anything else is ``forbidden``;
- markers: each expected code once, in order; any other marker launch (a forged or repeated
  code) is ``suspicious``. Forging can only move kernels out of a window, so after the warm-up
  any kernel that is not the harness's outside every timed window is ``suspicious`` too;
- per timed window: the harness's expected kernels (the blank multiset times the calls; the
  shortest launches of each name count as the harness's) are subtracted; everything else is
  the candidate's time. Fewer harness kernels than expected (a flush or poison skipped) is
  ``suspicious``; no Triton kernel of the candidate in a window is ``forbidden``.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from kernels.judge import ncu as profiling

# The harness's marker kernel (kernels/judge/census_mark.py); a candidate kernel of this name is refused.
MARK_KERNEL = "marathon_census_mark"
DURATION_METRIC = "gpu__time_duration.sum"
# Agreement of the candidate's own reported GPU time with the census's, per shape: the report
# is refused as ``suspicious`` when reported < census / AGREEMENT - AGREEMENT_MS. Why: ncu times
# each kernel serialized, gaps between kernels excluded, so an honest graph replay (which keeps
# the gaps) is rarely below it; it may be below by the L2 and clock state of back-to-back replays
# (a flushed replay of a small kernel runs warmer than a serialized profiled launch) and by the
# timestamps' granularity on kernels of a few microseconds: a third, plus 20 us. A timer or a
# figure forged to a fraction falls outside.
AGREEMENT, AGREEMENT_MS = 1.5, 0.020
# Kernels of the harness's kinds that also run outside its calls: fills (``fill_``, ``zero_``: the
# poison and L2 flush, Triton's autotuner's cache clear and ``reset_to_zero``) and same-dtype
# copies (``clone``, ``copy_``, ``.contiguous()``, which the guards allow a candidate). Identified
# by these identifiers in the kernel's demangled or mangled name; when a candidate launches them,
# their time is its own. Any other harness kernel is known only from the blank windows.
HARNESS_FUNCTORS = (("at", "native", "FillFunctor"), ("at", "native", "direct_copy_kernel_cuda"))
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class CensusError(ValueError):
    """The census's own data is unusable (malformed CSV, calibration that does not repeat)."""


@dataclass(frozen=True)
class Launch:
    """One kernel launch as ncu listed it: ``id`` (launch order), name, grid, GPU time in ns."""

    id: int
    name: str
    grid: tuple[int, ...]
    duration_ns: float


@dataclass(frozen=True)
class Window:
    """A marked stretch of the census session: ``kind`` "blank" or "timed", the bench shape's
    index, the marker codes that open and close it and the calls made inside."""

    kind: str
    bench: int
    open: int
    close: int
    calls: int


@dataclass
class Outcome:
    """What the census found: ``status`` ok, forbidden, suspicious or "not run" (with why),
    per bench index the candidate's GPU ms per call and its kernels."""

    status: str
    message: str = ""
    per_bench: dict[int, dict[str, Any]] = field(default_factory=dict)
    kernels: dict[str, int] = field(default_factory=dict)

    def report(self) -> dict[str, Any]:
        data: dict[str, Any] = {"status": self.status, "clock": "ncu kernel time from a trusted parent"}
        if self.status == "not run":
            data["reason"] = self.message
        elif self.message:
            data["message"] = self.message
        if self.kernels:
            data["kernels"] = dict(self.kernels)
        return data


def parse_launches(text: str) -> list[Launch]:
    """The launches in ``ncu --csv --page details --print-units base`` output (one row per launch
    and metric: "ID", "Kernel Name", "Grid Size", "Metric Name", "Metric Unit", "Metric Value"),
    with their ``DURATION_METRIC``, in ID order. Lines before the header are skipped; a launch
    listed twice or a row without a time raises ``CensusError``."""
    launches: dict[int, Launch] = {}
    for row in profiling.csv_rows(text):
        if row.get("Metric Name") != DURATION_METRIC:
            continue
        launch, name = (row.get("ID") or "").strip(), row.get("Kernel Name") or ""
        try:
            value = float((row.get("Metric Value") or "").replace(",", "")) * profiling.scale(row.get("Metric Unit"))
            grid = tuple(int(n) for n in re.findall(r"\d+", row.get("Grid Size") or ""))
        except ValueError:
            raise CensusError(f"launch {launch} ({name}) has no readable time: {row.get('Metric Value')!r}") from None
        if not launch.isdigit() or not name:
            raise CensusError(f"a census row without a launch ID or kernel name: {row}")
        if int(launch) in launches:
            raise CensusError(f"launch {launch} is listed twice")
        launches[int(launch)] = Launch(int(launch), name, grid, value)
    return [launches[k] for k in sorted(launches)]


def identifiers(name: str) -> tuple[str, ...]:
    """The identifiers of a kernel name, mangled (Itanium ``_Z...``) or demangled, in order:
    ``void at::native::elementwise_kernel<at::native::FillFunctor<float>>(...)`` and its mangled
    form both give ``at, native, elementwise_kernel, ..., FillFunctor, ...``."""
    if not name.startswith("_Z"):
        return tuple(_IDENTIFIER.findall(name))
    found, i, after_name = [], 2, False
    while i < len(name):
        char = name[i]
        if char.isdigit():
            j = i
            while j < len(name) and name[j].isdigit():
                j += 1
            previous = name[i - 1]
            literal = i >= 2 and name[i - 2] == "L" and not after_name
            if not after_name and (previous in "ST" or literal):  # S0_, T1_, Li4E: not a name
                i = j
                continue
            length = int(name[i:j])
            found.append(name[j:j + length])
            i, after_name = j + length, True
            continue
        after_name = False
        i += 1
    return tuple(found)


def is_harness_kind(name: str) -> bool:
    """A fill or same-dtype copy kernel of torch: identified by ``HARNESS_FUNCTORS``."""
    ids = set(identifiers(name))
    return any(set(functor) <= ids for functor in HARNESS_FUNCTORS)


def jit_names(source: str) -> frozenset[str]:
    """The names of the ``@triton.jit`` functions ``source`` defines, at any depth: Triton names
    a kernel after its Python function. Decorators may be stacked (``triton.autotune``,
    ``triton.heuristics`` above ``triton.jit``), called (``@triton.jit(debug=True)``) or reached
    through an alias (``import triton as tt``, ``from triton import jit as j``); ``k =
    triton.jit(f)`` names ``f``. A function of the same name without the decorator is not one."""
    tree = ast.parse(source)
    modules, jits = {"triton"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "triton"}
        elif isinstance(node, ast.ImportFrom) and node.module in ("triton", "triton.runtime", "triton.runtime.jit"):
            jits |= {a.asname or a.name for a in node.names if a.name == "jit"}

    def is_jit(expr: ast.expr) -> bool:
        target = expr.func if isinstance(expr, ast.Call) else expr
        if isinstance(target, ast.Name):
            return target.id in jits
        return isinstance(target, ast.Attribute) and target.attr == "jit" and isinstance(target.value, ast.Name) \
            and target.value.id in modules

    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(is_jit(d) for d in node.decorator_list):
            names.add(node.name)
        elif isinstance(node, ast.Call) and is_jit(node) and node.args and isinstance(node.args[0], ast.Name):
            names.add(node.args[0].id)  # k = triton.jit(f)
    return frozenset(names)


def _markers(launches: Sequence[Launch], windows: Sequence[Window]) -> dict[int, int]:
    """The launch ID of every expected marker code; raises ``_Verdict`` for a forged marker."""
    expected = [code for w in windows for code in (w.open, w.close)]
    seen = [(launch.id, launch.grid[0] if launch.grid else -1) for launch in launches
            if identifiers(launch.name) == (MARK_KERNEL,)]
    codes = [code for _, code in seen]
    extra = [code for code, count in Counter(codes).items() if code not in expected or count > 1]
    if extra:
        raise _Verdict("suspicious", f"window markers the harness did not launch (grid {extra[:3]}): forged or "
                       "repeated window markers")
    if codes != expected:
        raise _Verdict("suspicious", f"the window markers came {len(codes)} of {len(expected)} or out of order: "
                       "the harness's markers were suppressed or moved")
    return {code: launch_id for launch_id, code in seen}


class _Verdict(Exception):
    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _calibrate(launches: Sequence[Launch], blanks: Sequence[Window], at: dict[int, int]) -> dict[int, Counter]:
    """Per bench index, the harness's kernels of one call (a blank window's multiset / its calls)."""
    per_call: dict[int, Counter] = {}
    for window in blanks:
        inside = Counter(x.name for x in launches if at[window.open] < x.id < at[window.close])
        if any(count % window.calls for count in inside.values()):
            raise CensusError(f"the harness's kernels in blank window {window.bench} do not repeat per call: {inside}")
        per_call[window.bench] = Counter({name: count // window.calls for name, count in inside.items()})
    return per_call


def _window_time(inside: Sequence[Launch], expected: Counter, jits: frozenset[str], window: Window) -> dict:
    """The candidate's ms per call in one timed window: all but the expected harness kernels
    (the shortest launches of each harness name count as the harness's)."""
    ns, kernels = 0.0, Counter()
    by_name: dict[str, list[float]] = {}
    for launch in inside:
        if launch.name in jits:
            ns += launch.duration_ns
            kernels[launch.name] += 1
        else:
            by_name.setdefault(launch.name, []).append(launch.duration_ns)
    for name, want in expected.items():
        if len(by_name.get(name, [])) < want:
            raise _Verdict("suspicious", f"the harness's kernel {name} ran {len(by_name.get(name, []))} times in the "
                           f"timed window of shape {window.bench + 1}, not {want}: its flush or poisoning was skipped")
    for name, durations in by_name.items():
        extra = sorted(durations)[expected.get(name, 0):]
        ns += sum(extra)
        if extra:
            kernels[name] += len(extra)
    if not any(name in jits for name in kernels):
        raise _Verdict("forbidden", f"no Triton kernel of the candidate ran in the timed window of shape "
                       f"{window.bench + 1}: the work must run in the candidate's own Triton kernels")
    return {"candidate_ms": ns / 1e6 / window.calls, "calls": window.calls, "kernels": dict(kernels)}


def analyze(launches: Sequence[Launch], windows: Sequence[Window], jits: Iterable[str]) -> Outcome:
    """The census's verdict on ``launches`` (``parse_launches``) given the session's ``windows``
    (blank ones first, then timed ones, in the order the harness ran them) and the candidate's
    ``jit_names``. Raises ``CensusError`` when the blank windows do not calibrate."""
    jits = frozenset(jits)
    if MARK_KERNEL in jits:
        return Outcome("suspicious", f"the candidate defines a kernel named {MARK_KERNEL}, the judge's window marker")
    blanks = [w for w in windows if w.kind == "blank"]
    timed = [w for w in windows if w.kind == "timed"]
    if not blanks or not timed or windows[:len(blanks)] != blanks:
        raise CensusError("a census needs blank windows first, then timed windows")
    try:
        at = _markers(launches, windows)
        per_call = _calibrate(launches, blanks, at)
        harness = set().union(*per_call.values())
        loaded = [x for x in launches if x.id > at[blanks[-1].close] and identifiers(x.name) != (MARK_KERNEL,)]
        kernels = Counter(x.name for x in loaded)
        alien = sorted(name for name in kernels
                       if name not in jits and name not in harness and not is_harness_kind(name))
        if alien:
            return Outcome("forbidden", f"the census listed {len(alien)} kernel(s) that are neither the harness's nor "
                           f"the candidate's Triton kernels: {', '.join(alien[:4])}: the work must run in the "
                           "candidate's own Triton kernels", kernels=dict(kernels))
        spans = [(at[w.open], at[w.close]) for w in timed]
        outside = sorted({x.name for x in loaded if x.id > spans[0][0] and x.name in jits
                          and not any(a < x.id < b for a, b in spans)})
        if outside:
            return Outcome("suspicious", f"the candidate's kernel {outside[0]} ran outside every timed window after "
                           "the warm-up: work moved out of the timed calls (or a forged window marker)",
                           kernels=dict(kernels))
        per_bench = {w.bench: _window_time([x for x in loaded if at[w.open] < x.id < at[w.close]],
                                           Counter({n: c * w.calls for n, c in per_call.get(w.bench, {}).items()}),
                                           jits, w) for w in timed}
    except _Verdict as verdict:
        return Outcome(verdict.status, verdict.message)
    return Outcome("ok", "", per_bench, dict(kernels))


def disagrees(census_ms: float, reported_ms: float) -> bool:
    """True when the candidate's own GPU figure is below the census's beyond ``AGREEMENT``."""
    return reported_ms < census_ms / AGREEMENT - AGREEMENT_MS
