"""Benchmark our kernel against the baselines of any problem, side by side on one GPU.

For each shape: several input sets are drawn; our kernel and every baseline are first checked
against the high-precision reference (a provider that fails is reported as failing and no
speedup is computed from it); then all providers are timed interleaved with the L2 cache
flushed (``kernels.timing.time_interleaved``), and the problem's launch-bound shapes are
timed again under CUDA-graph replay, labelled ``graph``. Each row gives milliseconds, the
speedup over the primary baseline and over the fastest baseline, TFLOP/s, GB/s and the
fraction of the roofline on the H200's measured ceilings (``kernels.roofline.MEASURED``).

Without a CUDA GPU the benchmark refuses (exit status 2): interpreter timings say nothing about
GPU performance, and correctness on the CPU is the judge's and the tests' job.

    python -m kernels.bench mla-decode [--shapes bench|verify|cpu] [--reps N] [--json FILE] [--graph-all]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence, TextIO

from kernels import roofline

# "% roof" says how close a kernel comes to what the card really reaches, so it uses the
# measured ceilings, not the datasheet's (see kernels/roofline.py).
CEILINGS = roofline.MEASURED
OURS = "ours"
CHECK_SEEDS = (11, 12)
TIMING_SEEDS = (101, 102, 103)
EXIT_NO_GPU = 2
EXIT_INCORRECT = 1


def throughput(flops: float, nbytes: float, ms: float) -> tuple[float, float]:
    """(TFLOP/s, GB/s) achieved in ``ms`` milliseconds."""
    if ms <= 0:
        raise ValueError(f"time must be positive, got {ms} ms")
    seconds = ms * 1e-3
    return flops / seconds / 1e12, nbytes / seconds / 1e9


def relative_rms_error(out: Any, ref: Any) -> float:
    """‖out − ref‖₂ / ‖ref‖₂ in float64; infinity when ``out`` holds NaN or Inf."""
    import torch

    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(f"output shape {tuple(out.shape)} differs from the reference's {tuple(ref.shape)}")
    out64, ref64 = out.detach().double(), ref.detach().double().to(out.device)
    if not bool(torch.isfinite(out64).all()):
        return float("inf")
    return float((out64 - ref64).norm() / ref64.norm().clamp_min(1e-30))


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A left-aligned first column and right-aligned others; floats keep 4 significant digits."""

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        return "-" if value is None else str(value)

    text = [[cell(v) for v in header]] + [[cell(v) for v in row] for row in rows]
    if any(len(r) != len(header) for r in text):
        raise ValueError(f"every row needs {len(header)} cells")
    widths = [max(len(r[i]) for r in text) for i in range(len(header))]
    lines = []
    for r in text:
        parts = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
        lines.append("  ".join(parts).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


@dataclass
class Check:
    """Correctness of one provider at one shape: the worst error over the check seeds."""

    label: str
    error: float
    tolerance: float
    reason: str = ""

    @property
    def ok(self) -> bool:
        return not self.reason and self.error <= self.tolerance


def check_providers(
    problem: Any,
    shape: tuple[int, ...],
    providers: dict[str, Callable[..., Any]],
    *,
    device: str,
    dtype: str,
    seeds: Sequence[int] = CHECK_SEEDS,
) -> dict[str, Check]:
    """Run every provider on fresh inputs per seed and compare with the reference."""
    from kernels.judge import outputs

    reference = problem.load_reference()
    tolerance = problem.tolerance[dtype]
    count = len(problem.output_specs(shape, dtype))
    checks = {label: Check(label, 0.0, tolerance) for label in providers}
    for seed in seeds:
        inputs = problem.make_inputs(shape, seed, device, dtype)
        refs = outputs.parts(reference(**inputs), count)
        for label, fn in providers.items():
            check = checks[label]
            if check.reason:
                continue
            try:
                outs = outputs.check(problem, shape, dtype, fn(**inputs), device)
            except outputs.OutputError as error:
                check.reason = str(error)
                continue
            except Exception as error:  # a failing provider is reported, not fatal
                check.reason = f"{type(error).__name__}: {error}"
                continue
            # Every output (KDA's final state too) within the tolerance: the worst one counts.
            check.error = max(check.error, *(relative_rms_error(o, r) for o, r in zip(outs, refs)))
    return checks


@dataclass
class Row:
    """One timing mode of one shape."""

    shape: str
    mode: str
    ms: dict[str, float | None] = field(default_factory=dict)
    speedup_primary: float | None = None
    speedup_best: float | None = None
    tflops: float | None = None
    gbs: float | None = None
    roofline_pct: float | None = None
    spread: float | None = None


def summarize(
    shape_label: str,
    mode: str,
    ms: dict[str, float | None],
    primary: str,
    flops: float,
    nbytes: float,
    floor_ms: float,
    spread: float | None = None,
) -> Row:
    """Derive speedups and rates from the per-provider times; None where a time is missing."""
    row = Row(shape=shape_label, mode=mode, ms=dict(ms), spread=spread)
    ours = ms.get(OURS)
    if not ours:
        return row
    row.tflops, row.gbs = throughput(flops, nbytes, ours)
    row.roofline_pct = 100.0 * roofline.fraction(floor_ms, ours)
    baseline_times = [t for label, t in ms.items() if label != OURS and t]
    if ms.get(primary):
        row.speedup_primary = ms[primary] / ours
    if baseline_times:
        row.speedup_best = min(baseline_times) / ours
    return row


def device_fingerprint() -> dict[str, str]:
    import torch
    import triton

    return {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "triton": triton.__version__,
    }


def bench_problem(problem: Any, shape_set: str, reps: int, out: TextIO,
                  ours: Callable[..., Any] | None = None, graph_all: bool = False) -> dict[str, Any]:
    """Check and time every shape of ``shape_set`` on the current GPU; print the table.

    ``ours`` replaces the problem's own kernel (e.g. a rendered point of its search space).
    ``graph_all`` times every shape under CUDA-graph replay too, not only the launch-bound ones.
    """
    import torch

    from kernels.timing import L2Flusher, time_graph_replay, time_interleaved

    device, dtype = "cuda", problem.gpu_dtype
    baselines = problem.load_baselines(device)
    primary = next(iter(baselines))
    providers = {**baselines, OURS: ours or problem.load_ours()}
    launch_bound = {tuple(s) for s in problem.extra.get("launch_bound_shapes", ())}
    fingerprint = device_fingerprint()
    flusher = L2Flusher(device)
    print(
        f"{problem.name} on {fingerprint['gpu']} (torch {fingerprint['torch']}, CUDA {fingerprint['cuda']}, "
        f"triton {fingerprint['triton']}), {dtype}; roofline from {CEILINGS.describe(dtype)}; "
        f"primary baseline: {primary}",
        file=out, flush=True,
    )
    rows: list[Row] = []
    checks_out: dict[str, dict[str, Any]] = {}
    failed = False
    for shape in problem.shape_set(shape_set):
        shape = tuple(shape)
        label = problem.describe_shape(shape)
        checks = check_providers(problem, shape, providers, device=device, dtype=dtype)
        checks_out[label] = {k: {**asdict(c), "ok": c.ok} for k, c in checks.items()}
        for check in checks.values():
            if not check.ok:
                print(f"  {label}: {check.label} FAILED the check (error {check.error:.3g}, "
                      f"tolerance {check.tolerance:g}) {check.reason}", file=out, flush=True)
        if not checks[OURS].ok:
            failed = True
            continue
        timed = {k: fn for k, fn in providers.items() if checks[k].ok}
        input_sets = [problem.make_inputs(shape, seed, device, dtype) for seed in TIMING_SEEDS]
        flops, nbytes = roofline.work(problem, shape, dtype)
        floor_ms = CEILINGS.floor_ms(flops, nbytes, dtype)
        samples = time_interleaved(timed, input_sets, reps=reps, flusher=flusher)
        ms = {k: (samples[k].median_ms if k in samples else None) for k in providers}
        rows.append(summarize(label, "events", ms, primary, flops, nbytes, floor_ms, samples[OURS].spread))
        if graph_all or shape in launch_bound:
            graph_ms = {k: (time_graph_replay(fn, input_sets[0], flusher=flusher).median_ms if k in timed else None)
                        for k, fn in providers.items()}
            rows.append(summarize(label, "graph", graph_ms, primary, flops, nbytes, floor_ms))
        print(f"  {label}: " + ", ".join(f"{k} {v:.4g} ms" for k, v in ms.items() if v), file=out, flush=True)
        del input_sets
        torch.cuda.empty_cache()

    summary = print_summary(rows, list(providers), primary, failed, out)
    return {
        "problem": problem.name,
        "shape_set": shape_set,
        "dtype": dtype,
        "device": fingerprint,
        "primary": primary,
        "rows": [asdict(r) for r in rows],
        "checks": checks_out,
        "geomean": summary,
        "ours_correct": not failed,
        "reps": reps,
        "median_spread": statistics.median([r.spread for r in rows if r.spread is not None] or [0.0]),
    }


def print_summary(rows: list[Row], labels: list[str], primary: str, failed: bool, out: TextIO) -> dict[str, Any]:
    """Print the table of ``rows`` (one column per provider in ``labels``) and the geomeans per
    timing method; returns the geomeans as {mode: {geomean_x_primary, geomean_x_best, shapes}}."""
    from kernels.timing import geomean

    header = ["shape", "timing"] + [f"{k} ms" for k in labels] + [f"x {primary}", "x best", "TFLOP/s", "GB/s", "% roof"]
    table_rows = [
        [r.shape, r.mode] + [r.ms.get(k) for k in labels]
        + [r.speedup_primary, r.speedup_best, r.tflops, r.gbs, r.roofline_pct]
        for r in rows
    ]
    print(format_table(header, table_rows), file=out)
    summary: dict[str, Any] = {}
    for mode in ("events", "graph"):
        primary_x = [r.speedup_primary for r in rows if r.mode == mode and r.speedup_primary]
        best_x = [r.speedup_best for r in rows if r.mode == mode and r.speedup_best]
        if primary_x:
            summary[mode] = {"geomean_x_primary": geomean(primary_x), "geomean_x_best": geomean(best_x),
                             "shapes": len(primary_x)}
            print(f"geomean ({mode}, {len(primary_x)} shapes): {geomean(primary_x):.3g}x over {primary}, "
                  f"{geomean(best_x):.3g}x over the fastest baseline", file=out)
    if failed:
        print("our kernel FAILED the correctness check on some shapes: no speedup reported for them", file=out)
    return summary


def run(problem_name: str, shape_set: str = "bench", reps: int = 30, json_path: str | None = None,
        out: TextIO = sys.stdout, graph_all: bool = False) -> int:
    """Exit status: 0 measured, 1 our kernel failed a check, 2 no GPU here."""
    import torch

    from kernels.registry import get_problem

    problem = get_problem(problem_name)
    problem.shape_set(shape_set)
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    if not torch.cuda.is_available():
        print(
            "marathon bench needs a CUDA GPU: interpreter timings would say nothing about GPU performance. "
            "On this machine, check correctness with the tests or `marathon judge`.",
            file=sys.stderr,
        )
        return EXIT_NO_GPU
    result = bench_problem(problem, shape_set, reps, out, graph_all=graph_all)
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(result, handle, indent=2)
    return 0 if result["ours_correct"] else EXIT_INCORRECT


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("problem", help="problem name, e.g. mla-decode or kda")
    parser.add_argument("--shapes", default="bench", help="shape set: bench, verify or cpu (default bench)")
    parser.add_argument("--reps", type=int, default=30, help="timed repetitions per provider (default 30)")
    parser.add_argument("--json", dest="json_path", default=None, help="also write the results to this file")
    parser.add_argument("--graph-all", action="store_true",
                        help="time every shape under CUDA-graph replay too (default: the launch-bound ones)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels.bench", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run(args.problem, args.shapes, args.reps, args.json_path, graph_all=args.graph_all)


if __name__ == "__main__":
    sys.exit(main())
