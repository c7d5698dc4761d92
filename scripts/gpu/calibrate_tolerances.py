"""Measure the error of our kernels and of each problem's baseline against the reference, per
problem, regime (held-out included) and verify shape, at the GPU dtype: what the tolerances
are calibrated on. Prints one line per (problem, regime, shape, provider) with the relative RMS
error of every output and its share of the tolerance. Run on the H200 (a few minutes):

    python scripts/gpu/calibrate_tolerances.py [problem ...]
"""

from __future__ import annotations

import sys

import torch

from kernels.registry import get_problem

PROBLEMS = ["kda", "kda-general", "kda-varlen", "mla-decode", "mla-decode-paged"]


def errors(out, ref) -> list[float]:
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    return [float((o.double() - r.double()).norm() / r.double().norm()) for o, r in zip(outs, refs)]


def main(names: list[str]) -> None:
    for name in names or PROBLEMS:
        problem = get_problem(name)
        dtype = problem.gpu_dtype
        tolerance = problem.tolerance[dtype]
        providers = {"ours": problem.load_ours(), **problem.load_baselines("cuda")}
        reference = problem.load_reference()
        for regime in problem.regimes + problem.held_out:
            for shape in problem.shape_set("verify")[:3]:
                inputs = problem.make_inputs(shape, 1, "cuda", dtype, regime=regime)
                with torch.no_grad():
                    ref = reference(**inputs)
                    for label, fn in providers.items():
                        worst = errors(fn(**inputs), ref)
                        share = max(worst) / tolerance
                        print(f"{name:18s} {regime:20s} {str(shape):22s} {label:14s} "
                              + " ".join(f"{e:.2e}" for e in worst) + f"  {share:5.0%} of {tolerance:.0e}", flush=True)
                del inputs, ref
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1:])
