"""CPU seconds a judgement's correctness checks cost on the trusted side, per problem, in CPU
mode: for every checked call of a drawn plan, each bench shape's recheck and every timed call
(each timed call has inputs of its own and is compared in full), the inputs drawn
twice (the candidate's process and the referee each draw them), the float64 reference, and the
comparison of every output with the reference (here the reference with itself). Process CPU
time, so other load on the machine barely moves it; the candidate's own calls are not counted.

    python scripts/check_cost.py [problem ...] [--held-out] [--plans N]

Run it on two checkouts (PYTHONPATH) to see what a change to the inputs or checks costs.
"""

from __future__ import annotations

import random
import sys
import time

PROBLEMS = ["kda", "kda-general", "kda-varlen", "mla-decode", "mla-decode-paged",
            "examples.rmsnorm_residual.marathon_rmsnorm.definition:PROBLEM"]


def _parts(out):
    return out if isinstance(out, tuple) else (out,)


def cost(name: str, held_out: bool, plans: int) -> float:
    """Mean CPU seconds of one judgement's checks for problem ``name`` over ``plans`` plans."""
    import torch

    from kernels.judge import plan as planning
    from kernels.registry import get_problem

    problem = get_problem(name)
    reference = problem.load_reference()
    extra = {"held_out": True} if held_out else {}
    total = 0.0
    for seed in range(plans):
        the_plan = planning.build(problem, cpu=True, seeds=2, reps=3, warmup=1, rng=random.Random(seed), **extra)
        calls = the_plan.checks + [b.recheck for b in the_plan.bench] + list(the_plan.timed_calls().values())
        start = time.process_time()
        for call in calls:
            planning.inputs_of(problem, call, "cpu", problem.cpu_dtype)
            inputs = planning.inputs_of(problem, call, "cpu", problem.cpu_dtype)
            with torch.no_grad():
                refs = tuple(r.float() for r in _parts(reference(**inputs)))
            for ref in refs:
                float((ref - ref).pow(2).mean().sqrt()) / max(float(ref.pow(2).mean().sqrt()), 1e-30)
        total += time.process_time() - start
    return total / plans


def main(args: list[str]) -> None:
    held_out = "--held-out" in args
    plans = int(args[args.index("--plans") + 1]) if "--plans" in args else 3
    names = [a for a in args if not a.startswith("--") and not a.isdigit()] or PROBLEMS
    for name in names:
        print(f"{name.split(':')[0]:60s} {cost(name, held_out, plans):7.3f} s of checks per judgement", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
