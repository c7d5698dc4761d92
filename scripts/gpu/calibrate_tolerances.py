"""Measure the error of our kernels and of each problem's baseline against the reference, per
problem, regime (held-out included) and shape: what the tolerances are calibrated on. Prints one
line per (problem, regime, shape, provider) with the relative RMS error of every output (KDA: o,
then the final state) and the worst one's share of the tolerance, then per problem the worst
share of ours and of the baseline.

    python scripts/gpu/calibrate_tolerances.py [problem ...]            # H200: verify shapes, bf16
    TRITON_INTERPRET=1 python scripts/gpu/calibrate_tolerances.py --cpu # CPU: cpu shapes, fp32

On the H200 it takes a few minutes (the first three verify shapes per regime, seed 1).
"""

from __future__ import annotations

import sys

import torch

from kernels.judge import outputs
from kernels.registry import get_problem

PROBLEMS = ["kda", "kda-general", "kda-varlen", "mla-decode", "mla-decode-paged",
            "examples.rmsnorm_residual.marathon_rmsnorm.definition:PROBLEM"]


def errors(out, ref, count: int) -> list[float]:
    pairs = zip(outputs.parts(out, count), outputs.parts(ref, count))
    return [float((o.double() - r.double()).norm() / r.double().norm().clamp_min(1e-30)) for o, r in pairs]


def calibrate(name: str, device: str) -> None:
    problem = get_problem(name)
    dtype = problem.gpu_dtype if device == "cuda" else problem.cpu_dtype
    tolerance = problem.tolerance[dtype]
    providers = {"ours": problem.load_ours(), **problem.load_baselines(device)}
    reference = problem.load_reference()
    worst = {label: 0.0 for label in providers}
    shapes = problem.shape_set("verify")[:3] if device == "cuda" else problem.shape_set("cpu")
    for regime in problem.regimes + problem.held_out:
        for shape in shapes:
            inputs = problem.make_inputs(shape, 1, device, dtype, regime=regime)
            count = len(problem.output_specs(shape, dtype))
            with torch.no_grad():
                ref = reference(**inputs)
                for label, fn in providers.items():
                    found = errors(fn(**inputs), ref, count)
                    worst[label] = max(worst[label], max(found))
                    print(f"{problem.name:18s} {regime:20s} {str(shape):22s} {label:14s} "
                          + " ".join(f"{e:.2e}" for e in found) + f"  {max(found) / tolerance:6.1%} of {tolerance:.0e}",
                          flush=True)
            del inputs, ref
            if device == "cuda":
                torch.cuda.empty_cache()
    shares = ", ".join(f"{k} {v / tolerance:.1%}" for k, v in worst.items())
    print(f"{problem.name}: worst share of the tolerance {shares}", flush=True)


def main(args: list[str]) -> None:
    device = "cpu" if "--cpu" in args else "cuda"
    for name in [a for a in args if a != "--cpu"] or PROBLEMS:
        calibrate(name, device)


if __name__ == "__main__":
    main(sys.argv[1:])
