"""One GPU call for MLA decode: bf16 correctness, a sweep of kernel configs, then the benchmark.

    PYTHONPATH=. python3 scripts/gpu/mla_sweep_and_bench.py OUT_DIR [--sweep-only]

1. bf16 correctness of the committed kernel at the verify and bench shapes.
2. Each point below, rendered from kernels/mla/space.py, checked at a ragged shape, then all
   points timed interleaved per bench shape (events, L2 flushed) and, for the launch-bound
   shapes, under CUDA-graph replay. Score: geomean over shapes of graph time where measured,
   event time elsewhere.
3. ``kernels.bench`` with the best point as "ours" against the baselines.
Everything is also written as JSON under OUT_DIR.
"""

import json
import os
import statistics
import sys
import time

import torch

from kernels import bench
from kernels.config_source import import_source
from kernels.mla import space
from kernels.mla.decode import mla_decode
from kernels.mla.definition import PROBLEM
from kernels.mla.reference import reference
from kernels.timing import L2Flusher, time_graph_replay, time_interleaved

D = space.DEFAULT
# The default since 2026-12-03 (bf16 partials, the combine reading 64 splits x 64 values per
# step with 2 warps) against the earlier default and the batch-1 alternatives.
POINTS = {
    "default": {**D, "fused": False},
    "fp32-partials": {**D, "partial_dtype": "float32"},
    "before-2026-12-03": {**D, "partial_dtype": "float32", "combine_block_dv": 128, "combine_block_s": 32,
                          "combine_num_warps": 4},
    "combine-s128": {**D, "combine_block_s": 128},
    "bh32w8": {**D, "block_h": 32, "num_warps": 8},
}
# scripts/gpu/mla_launch_check.py writes "0" here when the fused kernel failed its checks.
# A missing file (the check crashed or timed out) counts as a failure too.
_FUSED_OK = os.environ.get("FUSED_OK_FILE")
if _FUSED_OK and not (os.path.exists(_FUSED_OK) and open(_FUSED_OK).read().strip() == "1"):
    POINTS = {name: point for name, point in POINTS.items() if not point["fused"]}


def load_point(name, point, folder):
    return import_source(space.render(point), f"mla_point_{name.replace('-', '_')}", folder)


def resources(module):
    """Registers, spills and shared memory of each compiled variant of the module's kernels."""
    found = {}
    for name in ("_mla_split_kernel", "_mla_combine_kernel", "_mla_fused_kernel"):
        try:
            for caches in getattr(module, name).device_caches.values():
                for part in caches if isinstance(caches, tuple) else (caches,):
                    if isinstance(part, dict):
                        for compiled in part.values():
                            if hasattr(compiled, "n_regs"):
                                found.setdefault(name, []).append(
                                    (compiled.n_regs, compiled.n_spills, compiled.metadata.shared))
        except Exception as error:
            found[name] = repr(error)[:100]
    return found


def main(out_dir, sweep_only=False):
    t0 = time.time()
    os.makedirs(out_dir, exist_ok=True)
    log = {"device": bench.device_fingerprint(), "correct": {}, "sweep": {}, "errors": {}}
    print(log["device"], flush=True)

    def save():
        with open(os.path.join(out_dir, "mla_gpu.json"), "w") as handle:
            json.dump(log, handle, indent=1, default=str)

    tol = PROBLEM.tolerance["bfloat16"]
    for shape in [] if sweep_only else PROBLEM.shapes["verify"] + PROBLEM.shapes["bench"][:4]:
        errs = []
        try:
            for seed in (1, 2):
                x = PROBLEM.make_inputs(shape, seed, "cuda", "bfloat16")
                errs.append(bench.relative_rms_error(mla_decode(**x), reference(**x)))
        except Exception as error:
            print(f"check {shape}: {error!r}"[:400], flush=True)
            errs.append(float("inf"))
        log["correct"][str(shape)] = errs
        print(f"check {shape}: rel err {max(errs):.2e} {'ok' if max(errs) <= tol else 'FAIL'}", flush=True)
    save()

    kernels = {}
    for name, point in POINTS.items():
        try:
            module = load_point(name, point, "/tmp/mla_src")
            fn = module.kernel
            x = PROBLEM.make_inputs((3, 64, 777), 5, "cuda", "bfloat16")
            err = bench.relative_rms_error(fn(**x), reference(**x))
            log["errors"][name] = err
            if err <= tol:
                kernels[name] = fn
            print(f"point {name}: err {err:.2e} ({time.time() - t0:.0f} s) regs/spills/smem {resources(module)}",
                  flush=True)
        except Exception as error:
            log["errors"][name] = repr(error)[:300]
            print(f"point {name}: {error!r}"[:300], flush=True)
    headline = PROBLEM.make_inputs(PROBLEM.shapes["bench"][0], 9, "cuda", "bfloat16")
    for name, fn in kernels.items():
        fn(**headline)  # the first call at a new shape compiles (the split count is a constexpr)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(200):
            fn(**headline)
        host_us = (time.perf_counter() - start) / 200 * 1e6
        torch.cuda.synchronize()
        log.setdefault("host_us_per_call", {})[name] = host_us
    print("host us per call (headline, no sync):", {k: round(v, 1) for k, v in log["host_us_per_call"].items()},
          flush=True)
    flusher = L2Flusher()
    launch_bound = {tuple(s) for s in PROBLEM.extra["launch_bound_shapes"]}
    score_ms = {name: [] for name in kernels}
    for shape in PROBLEM.shapes["bench"]:
        sets = [PROBLEM.make_inputs(shape, s, "cuda", "bfloat16") for s in (7, 8)]
        samples = time_interleaved(kernels, sets, reps=10, flusher=flusher)
        row = {name: {"events": samples[name].median_ms} for name in kernels}
        for name, fn in kernels.items():
            if shape in launch_bound:
                row[name]["graph"] = time_graph_replay(fn, sets[0], flusher=flusher).median_ms
            score_ms[name].append(row[name].get("graph", row[name]["events"]))
        log["sweep"][str(shape)] = row
        print(f"sweep {shape}: " + ", ".join(f"{n} {v['events'] * 1e3:.1f}/{v.get('graph', 0) * 1e3:.1f}us"
                                             for n, v in row.items()), flush=True)
        save()
    scores = {name: statistics.geometric_mean(v) for name, v in score_ms.items()}
    best = min(scores, key=scores.get)
    log["scores_ms"], log["best"], log["best_point"] = scores, best, POINTS[best]
    print("scores (geomean ms):", {k: round(v * 1e3, 2) for k, v in sorted(scores.items(), key=lambda kv: kv[1])},
          f"best {best} = {POINTS[best]}", flush=True)
    save()
    if sweep_only:
        return

    result = bench.bench_problem(PROBLEM, "bench", 20, sys.stdout, ours=kernels[best])
    log["bench"] = result
    save()
    print(f"total {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/mla_out", sweep_only="--sweep-only" in sys.argv)
