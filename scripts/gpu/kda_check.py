"""GPU check of our KDA kernels against the float64 recurrence and FLA's chunk_kda.

Usage (on the H200, FLA installed from a wheel, FLA_FLASH_KDA=0):
    python3 scripts/gpu/kda_check.py [VARIANTS_JSON] [--reps N] [--skip-verify]

VARIANTS_JSON is a list of {"label": ..., overrides of chunk.CONFIG}; each variant is
rendered with kernels.kda.space.render (so the candidate path is exercised), compiled in
parallel worker processes to fill Triton's cache, checked for correctness (bf16, relative
RMS error against the float64 reference) at the verify and bench shapes, and timed
interleaved with FLA (L2 flushed) at the bench shapes. Prints tables; writes JSON to $OUT.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("FLA_FLASH_KDA", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# The preparation kernel dominated the first H200 run with one 8-warp program per SM
# (175-255 registers per thread); these variants trade warps and channel tile for occupancy.
DEFAULT_VARIANTS = [
    {"label": "default"},
    {"label": "blk16w4", "prep_block_k": 16, "prep_num_warps": 4},
    {"label": "blk16w2", "prep_block_k": 16, "prep_num_warps": 2},
    {"label": "flat16w2", "prep_variant": "flat", "prep_block_k": 16, "prep_num_warps": 2},
    {"label": "flat16w4", "prep_variant": "flat", "prep_block_k": 16, "prep_num_warps": 4},
    {"label": "flat64w4", "prep_variant": "flat", "chunk": 64, "prep_block_k": 16, "prep_num_warps": 4},
    {"label": "stages2", "prep_num_stages": 2},
]


def load_candidate(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def render_variants(variants: list[dict], directory: str) -> dict[str, str]:
    from kernels.kda import space

    paths = {}
    for variant in variants:
        point = dict(space.DEFAULT)
        point.update({k: v for k, v in variant.items() if k != "label"})
        path = os.path.join(directory, f"kda_{variant['label']}.py")
        Path(path).write_text(space.render(point))
        paths[variant["label"]] = path
    return paths


def _warm(path: str) -> str:
    """Compile one candidate in a worker process (fills Triton's on-disk cache)."""
    import torch

    from kernels.kda.definition import make_inputs

    start = time.time()
    try:
        module = load_candidate(path, "warm_" + Path(path).stem)
        inputs = make_inputs((1, 100, 2, 128), 0, "cuda", "bfloat16")
        module.kernel(**inputs)
        torch.cuda.synchronize()
    except Exception as error:  # a variant that fails to build is reported and dropped
        return f"FAILED {Path(path).stem}: {type(error).__name__}: {str(error)[:300]}"
    return f"{Path(path).stem}: compiled in {time.time() - start:.1f}s"


def rel_error(out, ref) -> float:
    import torch

    out = out.float()
    if not torch.isfinite(out).all():
        return float("nan")
    return ((out - ref).norm() / ref.norm()).item()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("variants", nargs="?", default=None)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--skip-verify", action="store_true")
    args = parser.parse_args()
    variants = json.loads(args.variants) if args.variants else DEFAULT_VARIANTS

    import torch
    import triton

    from kernels.kda.baseline import baselines
    from kernels.kda.definition import PROBLEM, make_inputs
    from kernels.kda.reference import kda_chunked_reference, kda_reference
    from kernels import roofline
    from kernels.timing import L2Flusher, geomean, time_interleaved

    out_dir = os.environ.get("OUT", tempfile.mkdtemp())
    print(f"device {torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}", flush=True)
    work = tempfile.mkdtemp()
    paths = render_variants(variants, work)
    start = time.time()
    with mp.get_context("spawn").Pool(min(len(paths), 8)) as pool:
        for label, line in zip(list(paths), pool.map(_warm, list(paths.values()))):
            print(line, flush=True)
            if line.startswith("FAILED"):
                del paths[label]
    print(f"parallel compile {time.time() - start:.1f}s", flush=True)
    ours = {label: load_candidate(path, f"cand_{label}").kernel for label, path in paths.items()}
    providers = dict(baselines("cuda"))
    providers.update(ours)
    results = {"variants": variants, "errors": {}, "timing": {}}

    def check(shapes, fns):
        print("\n== correctness: relative RMS error vs float64 recurrence (bf16 inputs, seed 1) ==", flush=True)
        print("shape".ljust(22) + "".join(label.rjust(11) for label in fns), flush=True)
        for shape in shapes:
            inputs = make_inputs(shape, 1, "cuda", "bfloat16")
            # The recurrence is one step per token: long sequences use the float64 chunked form,
            # which the CPU tests check against it.
            ref = kda_reference(**inputs) if shape[1] <= 8192 else kda_chunked_reference(**inputs, chunk=64)
            row = {label: rel_error(fn(**inputs), ref) for label, fn in fns.items()}
            results["errors"][str(shape)] = row
            print(str(shape).ljust(22) + "".join(f"{row[label]:11.2e}" for label in fns), flush=True)
            del ref, inputs
            torch.cuda.empty_cache()

    first = load_candidate(next(iter(paths.values())), "stage_probe")
    providers["prep_only"] = lambda q, k, v, g, beta, scale: first._prepare(q, k, v, g, beta, scale)
    print("\n== timing: median ms, L2 flushed, interleaved ==", flush=True)
    flusher = L2Flusher()
    speedups = {label: [] for label in ours}
    for shape in PROBLEM.shape_set("bench"):
        input_sets = [make_inputs(shape, seed, "cuda", "bfloat16") for seed in (11, 12)]
        t0 = time.time()
        samples = time_interleaved(providers, input_sets, reps=args.reps, warmup=2, flusher=flusher)
        ms = {label: s.median_ms for label, s in samples.items()}
        spread = {label: s.spread for label, s in samples.items()}
        base = ms[next(iter(providers))]
        tokens = shape[0] * shape[1] * shape[2]
        cells = []
        for label, value in ms.items():
            cells.append(f"{label}={value:.3f}ms({tokens and value * 1e6 / tokens:.2f}ns/th)")
            if label in ours:
                speedups[label].append(base / value)
        results["timing"][str(shape)] = {"ms": ms, "spread": spread}
        print(f"{shape}: " + " ".join(cells) + f"  [{time.time() - t0:.0f}s]", flush=True)
        flop_count, byte_count = roofline.work(PROBLEM, shape, "bfloat16")
        best = min((ms[label], label) for label in ours)
        print(
            f"    best ours {best[1]}: {base / best[0]:.2f}x vs {next(iter(providers))}, "
            f"{byte_count / best[0] / 1e6:.0f} GB/s of ideal traffic, "
            f"{flop_count / best[0] / 1e9:.1f} TFLOP/s",
            flush=True,
        )
        del input_sets
        torch.cuda.empty_cache()
    print("\n== geomean speedup over the primary baseline ==", flush=True)
    for label, values in speedups.items():
        print(f"{label}: {geomean(values):.3f}x  ({' '.join(f'{v:.2f}' for v in values)})", flush=True)
    results["geomean"] = {label: geomean(values) for label, values in speedups.items()}
    Path(out_dir, "kda_check.json").write_text(json.dumps(results, indent=1))
    del providers["prep_only"]
    check(PROBLEM.shape_set("bench"), providers)
    if not args.skip_verify:
        check(PROBLEM.shape_set("verify"), ours)
    Path(out_dir, "kda_check.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
