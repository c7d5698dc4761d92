"""``marathon bench judge``: what one judgement costs, phase by phase, cold and warm, alone and
several at once on one GPU.

For each problem the seed kernel (a valid candidate) is judged ``runs`` times one after
another, then ``concurrent`` times at once (threads in this process, as a GPU worker runs
them, sharing the GPU through the lease). With ``fresh_cache`` the first run starts from an
empty Triton and inductor cache (a new worker on a new node: every baseline compiles and
autotunes) and the later runs reuse what it left (a restarted worker); without it, every run
uses the worker's own caches. Like a GPU worker, the benchmark keeps its referees between
judgements (``kernels/judge/referees.py``): the first run starts one (its baseline compiles or
loads from the caches), later runs reuse it, and before the judgements at once the pool is
primed to ``concurrent`` referees, as a worker primes its own before it polls. With
``keep_referees=False`` every judgement starts a fresh referee. Numbers are the caller's wall
clock; nothing here is a test.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Optional, TextIO

PHASES = ("startup", "load", "references", "verify", "warm", "baseline_warm", "lease_wait", "timing", "recheck",
          "closing")
CACHE_VARIABLES = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")
# The judge's heartbeat label for each checked call (kernels/judge/drive.py), and the shape it names.
CHECK_LABEL = re.compile(r"^checking correctness, call \d+/\d+ \((?P<shape>.*)\)$")


@dataclass
class Judgement:
    problem: str
    label: str            # "1 (empty cache)", "2", "concurrent 3/4"
    status: str
    speedup: Optional[float]
    seconds: float
    phases: dict[str, float] = field(default_factory=dict)
    gpu_busy: Optional[float] = None  # fraction of its wall time, runs one after another only
    referee_reused: bool = False
    # Compile (and autotune) time: see ``first_call_excess``; None where it could not be told.
    compile_s: Optional[float] = None
    # Per bench shape: the speedup, both medians and spreads (20-80 % range over the median) and
    # the CUDA-graph speedup where timed, so a judgement's noise can be told from a real change.
    shapes: list[dict] = field(default_factory=list)


@dataclass
class Concurrency:
    problem: str
    judgements: int
    wall_s: float          # first start to last end
    sequential_s: float    # judgements x the median of the sequential warm runs
    statuses: list[str] = field(default_factory=list)
    gpu_busy: Optional[float] = None  # fraction of the wall time, where NVML is available
    prime_s: Optional[float] = None   # priming the referees beforehand (not in wall_s)


class PhaseClock:
    """The judge's heartbeat, kept as (the caller's time, label) at each change of label: the judge
    names the phase and the call it is in (one label per checked call), this process keeps the time."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, str]] = []

    def __call__(self, label: str) -> None:
        if not self.marks or self.marks[-1][1] != label:
            self.marks.append((time.monotonic(), label))


def first_call_excess(marks: list[tuple[float, str]]) -> Optional[float]:
    """Seconds the candidate spent compiling (and autotuning), as the caller's clock sees it: at
    each checked shape, how much longer its first call took than the median of its later calls
    there (the first call of a new shape compiles; the later ones find the kernel compiled), summed
    over the shapes. ``marks`` are a ``PhaseClock``'s; None when no shape was checked twice. These
    calls are part of "verify"; a bench shape that needs a compile of its own compiles in "warm"."""
    calls: dict[str, list[float]] = {}
    for (began, label), (ended, _) in zip(marks, marks[1:]):
        found = CHECK_LABEL.match(label)
        if found:
            calls.setdefault(found["shape"], []).append(ended - began)
    excess = [max(0.0, times[0] - statistics.median(times[1:])) for times in calls.values() if len(times) > 1]
    return round(sum(excess), 3) if excess else None


def _judge_once(problem: str, source: str, device: Optional[str], label: str, lease_path: Optional[str],
                insecure: bool, referees=None) -> Judgement:
    from kernels.judge import JudgeReport, RefereeFailure, judge

    started, clock = time.monotonic(), PhaseClock()
    try:
        report = judge(source, problem, device=device, lease_path=lease_path, insecure_no_isolation=insecure,
                       referees=referees, heartbeat=clock)
    except RefereeFailure as error:  # the judge's own failure: shown as a crashed judgement, with why
        report = JudgeReport(status="crashed", message=str(error))
    if report.referee_reused:
        label += " (kept referee)"
    found = Judgement(problem, label, report.status, report.speedup, round(time.monotonic() - started, 2),
                      dict(report.phases), referee_reused=report.referee_reused, shapes=_shape_figures(report),
                      compile_s=first_call_excess(clock.marks + [(time.monotonic(), "")]))
    # As each judgement ends, so that a benchmark cut short still says what it measured.
    print(f"  {problem} {label}: {found.status} in {found.seconds:.1f} s, compile {found.compile_s} s, "
          f"phases {json.dumps(found.phases)}"
          + (f", message {report.message[:300]!r}" if report.status != "ok" else ""), file=sys.stderr, flush=True)
    for item in found.shapes:
        print(f"    {item['shape']}: {item['speedup']:.3f}x (candidate {item['candidate_ms'] * 1e3:.1f} us "
              f"spread {item['candidate_spread']:.2f}, baseline {item['baseline_ms'] * 1e3:.1f} us spread "
              f"{item['baseline_spread']:.2f}, {item['reps']} calls"
              + (f"; graph {item['graph_speedup']:.3f}x" if "graph_speedup" in item else "") + ")",
              file=sys.stderr, flush=True)
    return found


def _shape_figures(report) -> list[dict]:
    """What the report says of each timed shape, small enough to print."""
    figures = []
    for entry in report.shapes or []:
        timing = entry.get("timing")
        if not timing:
            continue
        cand, base = timing["candidate"], timing["baseline"]
        item = {"shape": entry.get("shape"), "speedup": entry.get("speedup"),
                "candidate_ms": cand.get("median_ms"), "candidate_spread": cand.get("spread"),
                "baseline_ms": base.get("median_ms"), "baseline_spread": base.get("spread"), "reps": cand.get("reps")}
        graph = entry.get("graph") or {}
        if graph.get("speedup") is not None:
            item["graph_speedup"] = graph["speedup"]
        figures.append(item)
    return figures


def _busy_sampler(device: Optional[str]):
    """The evaluation worker's NVML sampler where it exists and a GPU is here, else None."""
    if device == "cpu":
        return None
    from activities import gpu_busy

    index = gpu_busy.gpu_index(os.environ)
    return None if index is None else gpu_busy.sampler_for(index)


def bench_problem(problem: str, runs: int, concurrent: int, device: Optional[str], fresh_cache: bool,
                  lease_path: Optional[str], insecure: bool, progress: TextIO,
                  referees=None) -> tuple[list[Judgement], Optional[Concurrency]]:
    from kernels.registry import get_problem

    source = get_problem(problem).seed_source()
    judgements: list[Judgement] = []
    for number in range(1, runs + 1):
        label = f"{number}" + (" (empty cache)" if fresh_cache and number == 1 else "")
        print(f"judging {problem}, run {label} ...", file=progress, flush=True)
        sampler = _busy_sampler(device)
        window = sampler.begin() if sampler is not None else None
        judgements.append(_judge_once(problem, source, device, label, lease_path, insecure, referees))
        if window is not None:
            figures = sampler.end(window)
            if figures.gpu_busy_s is not None and figures.wall_s > 0:
                judgements[-1].gpu_busy = round(figures.gpu_busy_s / figures.wall_s, 3)
    if concurrent < 2:
        return judgements, None
    results: list[Optional[Judgement]] = [None] * concurrent

    def one(index: int) -> None:
        results[index] = _judge_once(problem, source, device, f"concurrent {index + 1}/{concurrent}", lease_path,
                                     insecure, referees)

    prime_s = None
    if referees is not None:
        print(f"priming {concurrent} referees for {problem} ...", file=progress, flush=True)
        clock = time.monotonic()
        for record in referees.prime([problem], count=concurrent, lease_path=lease_path):
            if "error" in record:
                print(f"  priming: {record['error']}", file=progress, flush=True)
        prime_s = round(time.monotonic() - clock, 2)
    print(f"judging {problem}, {concurrent} at once ...", file=progress, flush=True)
    sampler = _busy_sampler(device)
    window = sampler.begin() if sampler is not None else None
    started = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(concurrent)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - started
    busy = None
    if window is not None:
        figures = sampler.end(window)
        if figures.gpu_busy_s is not None and figures.wall_s > 0:
            busy = round(figures.gpu_busy_s / figures.wall_s, 3)
    done = [j for j in results if j is not None]
    judgements.extend(done)
    warm = [j.seconds for j in judgements[1 if fresh_cache and runs > 1 else 0:runs]] or [wall]
    return judgements, Concurrency(problem, concurrent, round(wall, 2), round(concurrent * statistics.median(warm), 2),
                                   [j.status for j in done], busy, prime_s)


def render(judgements: list[Judgement], concurrency: list[Concurrency], device: str) -> str:
    header = ["problem", "run", "status", "speedup", "GPU busy", "total s", "compile", *PHASES]
    rows = [header, ["---"] * len(header)]
    for j in judgements:
        busy = f"{100 * j.gpu_busy:.0f} %" if j.gpu_busy is not None else "-"
        rows.append([j.problem, j.label, j.status, f"{j.speedup:.3f}x" if j.speedup else "-", busy, f"{j.seconds:.1f}",
                     "-" if j.compile_s is None else f"{j.compile_s:.1f}",
                     *(f"{j.phases[p]:.1f}" if p in j.phases else "-" for p in PHASES)])
    lines = [f"judgement wall time by phase (seconds), device: {device}", ""]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines += ["", "compile: the candidate's first call at each checked shape beyond its later calls there (compile "
              "and autotune), on this process's clock; it is part of verify, not added to the total again."]
    if concurrency:
        lines += ["", "| problem | at once | wall s | one after another s | ratio | GPU busy | statuses | "
                  "referees primed before, s |", "|---|---|---|---|---|---|---|---|"]
        for c in concurrency:
            ratio = c.wall_s / c.sequential_s if c.sequential_s else float("nan")
            busy = f"{100 * c.gpu_busy:.0f} %" if c.gpu_busy is not None else "-"
            lines.append(f"| {c.problem} | {c.judgements} | {c.wall_s:.1f} | {c.sequential_s:.1f} | {ratio:.2f} | "
                         f"{busy} | {', '.join(c.statuses)} | "
                         f"{'-' if c.prime_s is None else f'{c.prime_s:.1f}'} |")
    return "\n".join(lines)


def run(problems: list[str], runs: int = 2, concurrent: int = 0, device: Optional[str] = None,
        fresh_cache: bool = False, json_path: Optional[str] = None, lease_path: Optional[str] = None,
        insecure: bool = False, out: TextIO = sys.stdout, progress: TextIO = sys.stderr,
        keep_referees: bool = True) -> int:
    """Exit status 0 when every judgement of the seed was ``ok``, else 1."""
    from kernels.judge.environment import judge_device
    from kernels.judge.referees import RefereePool

    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    if concurrent < 0:
        raise ValueError(f"concurrent must be >= 0, got {concurrent}")
    device_name = judge_device(device)
    saved = {name: os.environ.get(name) for name in CACHE_VARIABLES}
    judgements: list[Judgement] = []
    concurrency: list[Concurrency] = []
    try:
        for problem in problems:
            if fresh_cache:
                # An empty cache per problem: its first run pays every compile and autotune.
                root = tempfile.mkdtemp(prefix=f"marathon-bench-judge-{problem}-")
                os.environ["TRITON_CACHE_DIR"] = os.path.join(root, "triton")
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(root, "inductor")
            # One pool per problem, so each problem's first run shows a referee's cold start.
            referees = RefereePool(device_name, keep=max(1, concurrent)) if keep_referees else None
            try:
                found, together = bench_problem(problem, runs, concurrent, device, fresh_cache, lease_path, insecure,
                                                progress, referees)
            finally:
                if referees is not None:
                    referees.close()
            judgements += found
            if together is not None:
                concurrency.append(together)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    print(render(judgements, concurrency, device_name), file=out)
    if json_path:
        with open(json_path, "w") as handle:
            json.dump({"device": device_name, "judgements": [asdict(j) for j in judgements],
                       "concurrency": [asdict(c) for c in concurrency]}, handle, indent=2)
    return 0 if all(j.status == "ok" for j in judgements) else 1
