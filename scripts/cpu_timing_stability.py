"""How stable are CPU-mode (Triton interpreter) figures? Judge one kernel N times and print,
per judgement and shape, the baseline's and the candidate's median ms, their spreads and reps,
and the speedup; then each shape's speedup range (max / min) over the judgements.

    python scripts/cpu_timing_stability.py [--problem NAME] [--file KERNEL.py] [--runs N]

Without --file it judges the problem's seed kernel. CPU interpreter timings are never GPU
performance: this measures only whether they are stable enough to rank candidates.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default="tests.problems.scaled:PROBLEM")
    parser.add_argument("--file", default=None)
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()

    from kernels.judge import judge
    from kernels.registry import get_problem

    source = open(args.file).read() if args.file else get_problem(args.problem).seed_source()
    ratios: dict[str, list[float]] = {}
    for run in range(args.runs):
        started = time.perf_counter()
        report = judge(source, args.problem, device="cpu", seeds=2)
        print(f"judgement {run + 1}: {report.status}, geomean speedup {report.speedup}, "
              f"{time.perf_counter() - started:.1f} s")
        for shape in report.shapes:
            timing = shape.get("timing")
            if not timing:
                continue
            base, cand = timing["baseline"], timing["candidate"]
            ratios.setdefault(shape["shape"], []).append(shape["speedup"])
            print(f"  {shape['shape']:>10}  baseline {base['median_ms']:9.4f} ms (spread {base['spread']:.2f}, "
                  f"{base['reps']} reps, min {base['min_ms']:.4f})  candidate {cand['median_ms']:9.4f} ms "
                  f"(spread {cand['spread']:.2f}, {cand['reps']} reps)  speedup {shape['speedup']:.4g}"
                  + (f"  [{shape['stability']}]" if shape.get("stability") else ""))
    print("speedup range over judgements (max / min), per shape:")
    for label, values in ratios.items():
        print(f"  {label:>10}  {min(values):.4g} .. {max(values):.4g}  x{max(values) / min(values):.2f}  "
              f"median {statistics.median(values):.4g}")


if __name__ == "__main__":
    main()
