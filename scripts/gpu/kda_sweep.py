"""Our KDA kernels' knobs on the GPU, side by side with FLA's safe-gate path.

    PYTHONPATH=. python3 scripts/gpu/kda_sweep.py [--reps 10] [--no-fla] [--shapes B,T,H,D ...] [--only NAME ...]

1. Each point below, rendered from kernels/kda/space.py (a standalone candidate), checked in
   bf16 at a ragged shape against the float64 chunked reference.
2. All points and FLA (safe gate, default) timed interleaved per bench shape (L2 flushed,
   events, medians); ratio FLA safe-gate / point (our default / point with --no-fla); geomean
   per point. Every point's kernels are compiled first in parallel processes.
3. Where the time goes: CUDA kernel times per kernel name (torch.profiler) for every point and
   FLA's safe-gate path at each bench shape.
Writes kda_sweep.json to $OUT.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

os.environ.setdefault("FLA_FLASH_KDA", "0")


def points(default):
    d = dict(default)
    split = {**d, "prep_variant": "split", "chunk": 64, "prep_block_k": 16, "prep_num_warps": 4,
             "wy_block_k": 64, "wy_num_warps": 8, "scan_num_stages": 3}
    found = {
        "default": d,
        "split-c64-s3": split,
        "split-c64-bk32-w8-s3": {**split, "prep_block_k": 32, "prep_num_warps": 8},
        "split-c64-bk16-w8-s3": {**split, "prep_num_warps": 8},
        "split-c64-s3-bv64-w8": {**split, "scan_block_v": 64, "scan_num_warps": 8},
        "split-c64-s2": {**split, "scan_num_stages": 2},
        "split-c32-s3": {**split, "chunk": 32, "wy_num_warps": 4},
        "flat-c32-s3": {**d, "scan_num_stages": 3},
    }
    return found


def precompile(named_points, shape=(1, 200, 2, 128), workers=16):
    """Compile every point's kernels in parallel processes (Triton's on-disk cache is shared, and a
    kernel's cache key does not depend on the CONFIG literal), so the timed process only loads."""
    import subprocess

    script = ("import sys, json; sys.path.insert(0, {root!r}); sys.path.insert(0, {here!r});"
              "import kda_sweep as s; from kernels.kda.definition import make_inputs;"
              "fn = s.load({name!r}, json.loads({point!r}), '/tmp/kda_src_{name}').kernel;"
              "fn(**make_inputs({shape!r}, 1, 'cuda', 'bfloat16'))")
    root, here = str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)
    procs = []
    for name, point in named_points.items():
        code = script.format(root=root, here=here, name=name, point=json.dumps(point), shape=shape)
        procs.append((name, subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                                             stderr=subprocess.PIPE, text=True)))
        while sum(p.poll() is None for _, p in procs) >= workers:
            time.sleep(0.5)
    for name, proc in procs:
        _, err = proc.communicate()
        if proc.returncode:
            print(f"precompile {name}: rc {proc.returncode} {err[-300:]}", flush=True)


def load(name, point, folder="/tmp/kda_src"):
    from kernels.config_source import import_source
    from kernels.kda import space

    return import_source(space.render(point), f"kda_{name.replace('-', '_')}", folder)


def kernel_times(fn, inputs, calls=5):
    """ms per call of each CUDA kernel name (torch.profiler, CUPTI)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn(**inputs)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(**inputs)
        torch.cuda.synchronize()
    found = {}
    for event in prof.key_averages():
        us = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)
        if us > 0:
            found[event.key[:60]] = round(us / calls / 1e3, 4)
    return dict(sorted(found.items(), key=lambda kv: -kv[1]))


def main() -> int:
    import torch

    from kernels import bench, timing
    from kernels.kda import space
    from kernels.kda.baseline import baselines
    from kernels.kda.definition import BENCH_SHAPES, PROBLEM, make_inputs
    from kernels.kda.reference import kda_reference

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--no-fla", action="store_true", help="time our points only (no FLA compile)")
    parser.add_argument("--shapes", nargs="*", help="B,T,H,D bench shapes (default: the problem's)")
    parser.add_argument("--only", nargs="*", help="point names to run (default: all)")
    args = parser.parse_args()
    out = Path(os.environ.get("OUT", "."))
    log = {"device": bench.device_fingerprint(), "errors": {}, "timings": {}, "kernels": {}}
    t0 = time.time()
    fns = {}
    check = make_inputs((2, 700, 4, 128), 3, "cuda", "bfloat16")
    ref = kda_reference(**check, method="chunked")
    named = {n: p for n, p in points(space.DEFAULT).items() if not args.only or n in args.only}
    precompile({n: p for n, p in named.items() if not space.validate(p)})
    print(f"precompiled {len(named)} points ({time.time() - t0:.0f} s)", flush=True)
    shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes] if args.shapes else BENCH_SHAPES
    for name, point in named.items():
        problems = space.validate(point)
        if problems:
            log["errors"][name] = problems
            print(f"point {name}: invalid {problems}", flush=True)
            continue
        try:
            fn = load(name, point).kernel
            err = bench.relative_rms_error(fn(**check), ref)
            log["errors"][name] = err
            print(f"point {name}: err {err:.2e} ({time.time() - t0:.0f} s)", flush=True)
            if err <= PROBLEM.tolerance["bfloat16"]:
                fns[name] = fn
        except Exception as error:
            log["errors"][name] = repr(error)[:300]
            print(f"point {name}: {error!r}"[:300], flush=True)
    fla = {} if args.no_fla else {k.replace("-", "_"): f for k, f in baselines("cuda").items()}
    flusher = timing.L2Flusher()
    ratios = {name: [] for name in fns}
    for shape in shapes:
        sets = [make_inputs(shape, seed, "cuda", "bfloat16") for seed in (101, 102)]
        samples = timing.time_interleaved({**fla, **fns}, sets, reps=args.reps, warmup=2, flusher=flusher)
        row = {label: s.median_ms for label, s in samples.items()}
        log["timings"][str(shape)] = row
        for name in fns:
            ratios[name].append(row.get("fla_safe_gate", row.get("default", 1.0)) / row[name])
        print(f"{shape}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()) + " ms", flush=True)
        log["kernels"][str(shape)] = {name: kernel_times(fn, sets[0]) for name, fn in fns.items()}
        if fla:
            log["kernels"][str(shape)]["fla_safe_gate"] = kernel_times(fla["fla_safe_gate"], sets[0])
        print("   kernels:", json.dumps(log["kernels"][str(shape)]), flush=True)
        del sets
        torch.cuda.empty_cache()
        (out / "kda_sweep.json").write_text(json.dumps(log, indent=1))
    log["geomean_vs_safe_gate"] = {n: math.exp(sum(map(math.log, r)) / len(r)) for n, r in ratios.items() if r}
    geomeans = {k: round(v, 3) for k, v in log["geomean_vs_safe_gate"].items()}
    print("geomean (FLA safe-gate, or our default without FLA) / point:", geomeans, flush=True)
    if geomeans:
        best = max(geomeans, key=geomeans.get)
        log["best"] = best
        (out / "kda_best_point.json").write_text(json.dumps(named[best]))
        print(f"best {best}: {json.dumps(named[best])}", flush=True)
    (out / "kda_sweep.json").write_text(json.dumps(log, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
