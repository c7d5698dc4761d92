"""Our KDA kernels' knobs on the GPU, side by side with FLA's safe-gate path (issue 11).

    PYTHONPATH=. python3 scripts/gpu/kda_sweep.py [--reps 10]

1. Each point below, rendered from kernels/kda/space.py (a standalone candidate), checked in
   bf16 at a ragged shape against the float64 chunked reference.
2. All points and FLA (safe gate, default) timed interleaved per bench shape (L2 flushed,
   events, medians); ratio FLA safe-gate / point; geomean per point.
3. Where the time goes: CUDA kernel times per kernel name (torch.profiler) for the default
   point and FLA's safe-gate path at each bench shape.
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
    found = {
        "default": d,
        "flat-c64-w4": {**d, "chunk": 64, "prep_num_warps": 4},
        "flat-c32-w4": {**d, "prep_num_warps": 4},
        "blocks-c64": {**d, "prep_variant": "blocks", "chunk": 64, "prep_block_k": 32, "prep_num_warps": 4},
        "scan-bv64-w8": {**d, "scan_block_v": 64, "scan_num_warps": 8},
        "scan-bv16-w2": {**d, "scan_block_v": 16, "scan_num_warps": 2},
        "prep-bk32": {**d, "prep_block_k": 32, "prep_num_warps": 4},
        "c64-bv64": {**d, "chunk": 64, "prep_num_warps": 4, "scan_block_v": 64, "scan_num_warps": 8},
    }
    return found


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
    args = parser.parse_args()
    out = Path(os.environ.get("OUT", "."))
    log = {"device": bench.device_fingerprint(), "errors": {}, "timings": {}, "kernels": {}}
    t0 = time.time()
    fns = {}
    check = make_inputs((2, 700, 4, 128), 3, "cuda", "bfloat16")
    ref = kda_reference(**check, method="chunked")
    for name, point in points(space.DEFAULT).items():
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
    fla = {k.replace("-", "_"): f for k, f in baselines("cuda").items()}
    flusher = timing.L2Flusher()
    ratios = {name: [] for name in fns}
    for shape in BENCH_SHAPES:
        sets = [make_inputs(shape, seed, "cuda", "bfloat16") for seed in (101, 102)]
        samples = timing.time_interleaved({**fla, **fns}, sets, reps=args.reps, warmup=2, flusher=flusher)
        row = {label: s.median_ms for label, s in samples.items()}
        log["timings"][str(shape)] = row
        for name in fns:
            ratios[name].append(row["fla_safe_gate"] / row[name])
        print(f"{shape}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()) + " ms", flush=True)
        log["kernels"][str(shape)] = {"ours": kernel_times(fns.get("default", next(iter(fns.values()))), sets[0]),
                                      "fla_safe_gate": kernel_times(fla["fla_safe_gate"], sets[0])}
        print("   kernels:", json.dumps(log["kernels"][str(shape)]), flush=True)
        del sets
        torch.cuda.empty_cache()
        (out / "kda_sweep.json").write_text(json.dumps(log, indent=1))
    log["geomean_vs_safe_gate"] = {n: math.exp(sum(map(math.log, r)) / len(r)) for n, r in ratios.items() if r}
    print("geomean FLA safe-gate / point:", {k: round(v, 3) for k, v in log["geomean_vs_safe_gate"].items()},
          flush=True)
    (out / "kda_sweep.json").write_text(json.dumps(log, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
