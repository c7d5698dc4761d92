"""Nsight Compute in the judge: which metrics, how ``ncu`` runs, and what its CSV says.

The bounded extra time: a judgement asked for a profile (``judge(..., ncu=True)``) runs ``ncu``
once, after an accepted verdict, on one checked call at the first bench shape, in the candidate's
own sandbox. ``ncu`` profiles at most ``NCU_LAUNCH_COUNT`` kernel launches (each replayed once per
metric pass) and is killed after ``NCU_TIMEOUT_S`` seconds, or sooner when the judgement's own
deadline is nearer. Nothing here changes the verdict: the figures are informational.

What the numbers describe: the launches of that one call, the compile and any autotuning
included (they come first). A kernel launched several times keeps its last launch's figures, so
an autotuned kernel is described by the config it ran last; when autotuning uses up the launch
count, the profile may describe a config other than the chosen one (``launches`` says how many
it saw). The candidate shares ``ncu``'s stdout, so it could print CSV-shaped lines: the parser
starts at ``ncu``'s header and keeps only well-formed rows, but the figures stay advisory.

Metric names are Nsight Compute 2025.x names for Hopper (sm_90). Checked against NVIDIA's own
section rules (the WarpStateStats rule that reads ``smsp__average_warps_issue_stalled_<reason>_
per_issue_active.ratio`` for every reason below and ``smsp__average_warp_latency_per_inst_issued
.ratio``) and against published ncu invocations on H100/H200 for the others. Not verified against
a 2025.x ``ncu --query-metrics`` on an H200: ``sm__pipe_tensor_cycles_active`` (KernelAgent's
choice for the tensor pipe; Hopper's wgmma may count under ``sm__pipe_tensor_op_gmma_*`` instead)
and ``sm__inst_executed.avg.per_cycle_active``. A name ``ncu`` does not know makes it fail
outright: ``run`` then tries once more without the names it refused (in the time left) and the
reason lists them; ``marathon judge --ncu`` shows it on a new card or version.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import shutil
import signal
import subprocess
import time
from typing import Any, Callable, Optional, Sequence

# Seconds ncu may take, and kernel launches it may profile: the bound on the extra time.
NCU_TIMEOUT_S = 120.0
NCU_LAUNCH_COUNT = 40

# Stall reasons, as in smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio: average
# warps stalled for that reason per issue cycle, i.e. cycles of the "cycles per issued
# instruction" the reason accounts for.
STALL_REASONS = (
    "long_scoreboard", "short_scoreboard", "wait", "barrier", "math_pipe_throttle", "mio_throttle",
    "lg_throttle", "not_selected", "membar", "dispatch_stall", "no_instruction",
)
STALL_PREFIX = "stall_"

# ncu metric -> the name the report uses. 33 metrics (KernelAgent feeds 28).
NCU_METRICS = {
    # Speed of light (% of the peak sustained rate over the kernel's time)
    "gpu__time_duration.sum": "duration_ns",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory_throughput_pct",
    "l1tex__throughput.avg.pct_of_peak_sustained_active": "l1_throughput_pct",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "l2_throughput_pct",
    "dram__bytes.sum.per_second": "dram_bytes_per_s",
    # Occupancy
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "sm__maximum_warps_per_active_cycle_pct": "theoretical_occupancy_pct",
    # Launch
    "launch__registers_per_thread": "registers_per_thread",
    "launch__shared_mem_per_block_static": "shared_static_bytes",
    "launch__shared_mem_per_block_dynamic": "shared_dynamic_bytes",
    "launch__block_size": "block_size",
    "launch__grid_size": "grid_size",
    # Local memory (register spills) and caches
    "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum": "local_load_sectors",
    "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum": "local_store_sectors",
    "l1tex__t_sector_hit_rate.pct": "l1_hit_pct",
    "lts__t_sector_hit_rate.pct": "l2_hit_pct",
    # Compute
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": "tensor_pipe_pct",
    "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue_slots_pct",
    "sm__inst_executed.avg.per_cycle_active": "ipc",
    "smsp__average_warp_latency_per_inst_issued.ratio": "cycles_per_issue",
    **{f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio": STALL_PREFIX + reason
       for reason in STALL_REASONS},
}

# Units ncu may print (``--print-units base`` asks for the bare ones; a scaled CSV still parses).
_TIME_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 1024.0, "Mi": 1024.0**2, "Gi": 1024.0**3}
_COUNTED = ("byte", "sector")


def scale(unit: str) -> float:
    """The factor to this module's units: time in ns, bytes and sectors bare, rates per second."""
    numerator, _, denominator = (unit or "").strip().partition("/")
    factor = 1.0
    if numerator in _TIME_NS:
        factor = _TIME_NS[numerator]
    else:
        for counted in _COUNTED:
            if numerator.endswith(counted) and numerator[: -len(counted)] in _PREFIX:
                factor = _PREFIX[numerator[: -len(counted)]]
    if denominator in _TIME_NS:  # a rate: per ns/us/ms -> per second
        factor /= _TIME_NS[denominator] / 1e9
    return factor


def csv_rows(text: str) -> list[dict[str, str]]:
    """The rows of ``ncu --csv`` output as dicts by column name: from ncu's header line
    (``"ID",...``) on, quoted lines only (ncu's own ``==PROF==`` lines and whatever the profiled
    process printed are not rows); [] without a header."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        return []
    return list(csv.DictReader(io.StringIO("\n".join(line for line in lines[start:] if line.startswith('"')))))


def parse_csv(text: str) -> dict[str, dict[str, float]]:
    """Per kernel name, the known metrics from ``ncu --csv`` output (the details page: one row per
    launch and metric, columns "ID", ..., "Kernel Name", ..., "Metric Name", "Metric Unit",
    "Metric Value").

    A kernel launched more than once keeps its last launch's figures (launches in ID order) and
    adds ``launches`` and ``total_duration_ns`` (the sum over its launches). Lines before ncu's
    header, malformed rows, unknown metrics and "n/a" values are skipped.
    """
    launches: dict[int, tuple[str, dict[str, float]]] = {}
    for row in csv_rows(text):
        name, metric = row.get("Kernel Name"), NCU_METRICS.get(row.get("Metric Name") or "")
        launch = (row.get("ID") or "").strip()
        if not name or metric is None or not launch.isdigit():
            continue
        try:
            value = float((row.get("Metric Value") or "").replace(",", ""))
        except ValueError:
            continue
        launches.setdefault(int(launch), (name, {}))[1][metric] = value * scale(row.get("Metric Unit") or "")
    kernels: dict[str, dict[str, float]] = {}
    for launch in sorted(launches):
        name, metrics = launches[launch]
        previous = kernels.get(name, {})
        kernels[name] = {
            **metrics,
            "launches": previous.get("launches", 0) + 1,
            "total_duration_ns": previous.get("total_duration_ns", 0.0) + metrics.get("duration_ns", 0.0),
        }
    return kernels


def top_stalls(metrics: dict[str, float], count: int = 3) -> list[tuple[str, float, Optional[float]]]:
    """The ``count`` largest stall reasons: (reason, cycles per issued instruction, % of all
    cycles between two issues or None). Largest first; ties by name."""
    stalls = [(key[len(STALL_PREFIX):], value) for key, value in metrics.items()
              if key.startswith(STALL_PREFIX) and value > 0]
    stalls.sort(key=lambda item: (-item[1], item[0]))
    per_issue = metrics.get("cycles_per_issue")
    return [(reason, value, 100.0 * value / per_issue if per_issue else None) for reason, value in stalls[:count]]


def _pct(value: Any) -> Optional[float]:
    return round(float(value), 1) if isinstance(value, (int, float)) else None


def _kernel_summary(metrics: dict[str, float]) -> dict[str, Any]:
    dram, sm = metrics.get("dram_throughput_pct"), metrics.get("sm_throughput_pct")
    known = [v for v in (dram, sm) if v is not None]
    shared = [metrics[k] for k in ("shared_static_bytes", "shared_dynamic_bytes") if k in metrics]
    spills = [metrics[k] for k in ("local_load_sectors", "local_store_sectors") if k in metrics]
    summary: dict[str, Any] = {
        "sol_pct": _pct(max(known)) if known else None,
        "dram_pct": _pct(dram),
        "sm_pct": _pct(sm),
        "memory_pct": _pct(metrics.get("memory_throughput_pct")),
        "nearest_limit": None if len(known) < 2 else ("memory" if dram >= sm else "compute"),
        "occupancy_pct": _pct(metrics.get("achieved_occupancy_pct")),
        "theoretical_occupancy_pct": _pct(metrics.get("theoretical_occupancy_pct")),
        "registers": int(metrics["registers_per_thread"]) if "registers_per_thread" in metrics else None,
        "shared_bytes": int(sum(shared)) if shared else None,
        "block_size": int(metrics["block_size"]) if "block_size" in metrics else None,
        "grid_size": int(metrics["grid_size"]) if "grid_size" in metrics else None,
        "spill_sectors": int(sum(spills)) if spills else None,
        "l1_hit_pct": _pct(metrics.get("l1_hit_pct")),
        "l2_hit_pct": _pct(metrics.get("l2_hit_pct")),
        "tensor_pipe_pct": _pct(metrics.get("tensor_pipe_pct")),
        "issue_slots_pct": _pct(metrics.get("issue_slots_pct")),
        "cycles_per_issue": _pct(metrics.get("cycles_per_issue")),
        "top_stalls": [[reason, round(cycles, 2), _pct(share)] for reason, cycles, share in top_stalls(metrics)],
    }
    return summary


def summarize(kernels: Optional[dict[str, dict[str, float]]]) -> Optional[dict[str, Any]]:
    """What matters of a profile: the kernel that took the most time (by ``total_duration_ns``)
    with its speed of light ``sol_pct`` = max(DRAM %, SM %) of peak (KernelAgent stops at 95),
    the limit nearest (memory when DRAM % >= SM %), occupancy, registers, spills (local-memory
    sectors) and top three stalls; and ``overall``: DRAM/SM % and SOL weighted by time over all
    kernels. None for an empty profile."""
    if not kernels:
        return None
    times = {name: float(m.get("total_duration_ns") or m.get("duration_ns") or 0.0) for name, m in kernels.items()}
    top = max(sorted(kernels), key=lambda name: times[name])
    total = sum(times.values())
    summary = {"kernel": top, "kernels": len(kernels),
               "launches": int(sum(m.get("launches", 1) for m in kernels.values())),
               "duration_ns": round(total, 1), "share_pct": _pct(100.0 * times[top] / total) if total else None,
               **_kernel_summary(kernels[top])}
    overall: dict[str, Any] = {}
    for key, metric in (("dram_pct", "dram_throughput_pct"), ("sm_pct", "sm_throughput_pct")):
        weighted = [(times[n], m[metric]) for n, m in kernels.items() if metric in m]
        weight = sum(t for t, _ in weighted)
        if weighted:
            mean = sum(v for _, v in weighted) / len(weighted)  # without times, every kernel counts alike
            overall[key] = _pct(sum(t * v for t, v in weighted) / weight if weight else mean)
    known = [v for v in overall.values() if v is not None]
    overall["sol_pct"] = max(known) if known else None
    summary["overall"] = overall
    return summary


def summary_text(kernels: Optional[dict[str, dict[str, float]]]) -> str:
    """A few lines for people (``marathon judge --ncu``): the summary, then each kernel's figures."""
    summary = summarize(kernels)
    if summary is None:
        return "no kernels profiled"
    lines = [f"hottest kernel {summary['kernel']} ({_value(summary['share_pct'], '%')} of "
             f"{summary['duration_ns'] / 1e3:.1f} us "
             f"over {summary['kernels']} kernels, {summary['launches']} launches)",
             "  speed of light " + _value(summary["sol_pct"], "%") + f" (DRAM {_value(summary['dram_pct'], '%')}, "
             f"SM {_value(summary['sm_pct'], '%')}, memory {_value(summary['memory_pct'], '%')}); nearest limit: "
             f"{summary['nearest_limit'] or '?'}",
             f"  occupancy {_value(summary['occupancy_pct'], '%')} of theoretical "
             f"{_value(summary['theoretical_occupancy_pct'], '%')}; {_value(summary['registers'])} registers/thread, "
             f"{_value(summary['shared_bytes'])} B shared/block, block {_value(summary['block_size'])}, grid "
             f"{_value(summary['grid_size'])}; {_value(summary['spill_sectors'])} local-memory (spill) sectors",
             f"  L1 hit {_value(summary['l1_hit_pct'], '%')}, L2 hit {_value(summary['l2_hit_pct'], '%')}, tensor pipe "
             f"{_value(summary['tensor_pipe_pct'], '%')}, issue slots {_value(summary['issue_slots_pct'], '%')}, "
             f"{_value(summary['cycles_per_issue'])} cycles per issued instruction",
             "  top stalls: " + (stalls_text(summary["top_stalls"]) or "none reported")]
    overall = summary["overall"]
    lines.append(f"  all kernels: SOL {_value(overall.get('sol_pct'), '%')} "
                 f"(DRAM {_value(overall.get('dram_pct'), '%')}, SM {_value(overall.get('sm_pct'), '%')}), "
                 "weighted by time")
    for name, metrics in kernels.items():
        values = ", ".join(f"{key} {value:g}" for key, value in sorted(metrics.items()))
        lines.append(f"  {name}: {values}")
    return "\n".join(lines)


def stalls_text(stalls: Sequence[Sequence[Any]]) -> str:
    """``[["long_scoreboard", 6.1, 55.0], ...]`` -> ``"long_scoreboard 55%, ..."`` (cycles when no share)."""
    parts = []
    for reason, cycles, share in stalls:
        parts.append(f"{reason} {share:.0f}%" if share is not None else f"{reason} {cycles:g} cycles")
    return ", ".join(parts)


def _value(value: Any, unit: str = "") -> str:
    if value is None:
        return "?"
    return f"{value:g}{unit}" if isinstance(value, float) else f"{value}{unit}"


def argv(ncu: str, command: Sequence[str], metrics: Sequence[str] = tuple(NCU_METRICS)) -> list[str]:
    """The ncu command line around ``command`` (the candidate's process)."""
    # --clock-control none: leave the GPU's clocks as they are (ncu locks them to base by
    # default), so the profile describes the same machine the timings ran on.
    return [ncu, "--csv", "--print-units", "base", "--clock-control", "none", "--metrics", ",".join(metrics),
            "--target-processes", "all", "--launch-count", str(NCU_LAUNCH_COUNT), *command]


def install_dirs(ncu: str) -> tuple[str, ...]:
    """Folders the sandbox must be able to read for ``ncu`` to run: its installation and, since
    the CUDA toolkit's ncu is a wrapper that looks for Nsight Compute there, /opt/nvidia."""
    parent = os.path.dirname(ncu)
    root = os.path.dirname(parent) if os.path.basename(parent) == "bin" else parent
    return tuple(p for p in (root, "/opt/nvidia") if os.path.isdir(p))


def unknown_metrics(text: str, asked: Sequence[str]) -> list[str]:
    """The metrics of ``asked`` that ncu's errors in ``text`` say it does not know (its
    "==ERROR== Failed to find metric ..." lines): one unknown name fails the whole profile."""
    named = set()
    for line in text.splitlines():
        if "ERROR" in line and "metric" in line.lower():
            named.update(re.findall(r"[A-Za-z0-9_.]+", line))
    return [metric for metric in asked if metric in named]


def run(make_argv: Callable[[Sequence[str]], list[str]], stdin: bytes, cwd: str, timeout_s: float,
        pass_fds: Sequence[int]) -> tuple[Optional[dict[str, dict[str, float]]], str]:
    """Run the (sandboxed) ncu command line ``make_argv(metrics)``; (metrics per kernel, reason)
    or (None, why not). Past ``timeout_s`` in all, its whole process group (ncu and the
    candidate's process) is killed. When ncu refuses metrics it does not know (a name this module could not
    verify on this card or version), it runs once more without them, in the time left."""
    deadline = time.monotonic() + timeout_s
    asked, dropped = list(NCU_METRICS), []
    while True:
        left = deadline - time.monotonic()
        if dropped and left < 1.0:
            return None, f"ncu did not finish within {timeout_s:.0f} s (it refused {', '.join(dropped)})"
        process = subprocess.Popen(make_argv(asked), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, cwd=cwd, pass_fds=tuple(pass_fds), start_new_session=True)
        try:
            stdout, stderr = process.communicate(stdin, timeout=left)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return None, f"ncu did not finish within {timeout_s:.0f} s"
        text = stdout.decode(errors="replace")
        metrics = parse_csv(text)
        unknown = [] if metrics or dropped else unknown_metrics(text + "\n" + stderr.decode(errors="replace"), asked)
        if not unknown:
            break
        dropped = unknown
        asked = [metric for metric in asked if metric not in unknown]
    if not metrics:
        tail = (stderr or stdout).decode(errors="replace")[-300:]
        return None, f"ncu produced no metrics (exit {process.returncode}): {tail}"
    reason = (f"measured with ncu at the first bench shape, one call, inside the sandbox "
              f"(at most {NCU_LAUNCH_COUNT} launches, {timeout_s:.0f} s)")
    if dropped:
        reason += f"; ncu did not know {', '.join(dropped)}"
    return metrics, reason


def which() -> Optional[str]:
    """The real path of ``ncu`` on PATH, or None."""
    found = shutil.which("ncu")
    return os.path.realpath(found) if found else None
