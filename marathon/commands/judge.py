"""``marathon judge FILE --problem NAME``: judge one candidate kernel and print the verdict.

Exit status: 0 accepted, 1 rejected (any status but ``ok``), 2 usage error (missing file,
unknown problem, ``--ncu`` without a GPU or without ``ncu`` on PATH).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "judge",
        help="judge a candidate kernel: policy, correctness, timing against the baseline, profile",
        description="Runs the candidate in a sandboxed subprocess. Without a GPU (or with --device cpu) it uses "
        "Triton's interpreter at the problem's cpu shapes: correctness is real, timings are interpreter timings.",
    )
    parser.add_argument("file", help="candidate source: a Python file defining kernel(**inputs)")
    parser.add_argument("--problem", required=True, help=f"problem name ({', '.join(_known_problems())}) "
                        "or 'package.module:OBJECT'")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda when present, else cpu")
    parser.add_argument("--seeds", type=int, default=2, help="random input sets per shape (default 2)")
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions per shape")
    parser.add_argument("--confirm", action="store_true", help="more repetitions, as for a new best")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before the judgement is killed")
    parser.add_argument("--json", action="store_true", help="print the full report as JSON")
    parser.add_argument("--quiet", action="store_true", help="do not print the judgement's phases to stderr")
    parser.add_argument("--ncu", action="store_true",
                        help="GPU only: once accepted, profile one call at the first bench shape with Nsight Compute "
                        "(speed of light, occupancy, registers, spills, cache hit rates, stall reasons per kernel; "
                        "at most 120 s more); needs ncu on PATH")
    parser.add_argument("--census", choices=("confirm", "always", "off"), default="confirm",
                        help="GPU only: when an accepted judgement also lists its kernels with Nsight Compute from "
                        "outside the sandbox, whose kernel time then decides the speedup (default: with --confirm)")
    parser.add_argument("--insecure-no-isolation", action="store_true",
                        help="run the candidate WITHOUT OS isolation (bubblewrap) where it cannot be set up; "
                        "the report says so")
    parser.set_defaults(handler=handle)


def _known_problems() -> list[str]:
    """Every problem the registry knows here: the built-in ones and those installed packages register."""
    from kernels.registry import problem_names

    return list(problem_names())


def handle(args: argparse.Namespace) -> int:
    from kernels.judge import RefereeFailure, judge
    from kernels.judge.isolation import IsolationUnavailable
    from kernels.registry import find_object_paths_here, problem_names
    from marathon.settings import get_settings

    path = Path(args.file)
    if not path.is_file():
        print(f"marathon judge: no such file: {path}", file=sys.stderr)
        return 2
    if args.seeds < 2 or (args.reps is not None and args.reps < 1) or args.timeout <= 0:
        print("marathon judge: --seeds must be >= 2, --reps >= 1 and --timeout > 0", file=sys.stderr)
        return 2
    find_object_paths_here(args.problem)  # as `marathon problem check` finds it
    problem = ncu_problem(args.device) if args.ncu else None
    if problem:
        print(f"marathon judge: {problem}", file=sys.stderr)
        return 2
    try:
        report = judge(path.read_text(), args.problem, device=args.device, seeds=args.seeds,
                       timing_reps=args.reps, confirm=args.confirm, timeout_s=args.timeout, ncu=args.ncu,
                       census=args.census, insecure_no_isolation=args.insecure_no_isolation,
                       lease_path=get_settings().gpu_lease,
                       heartbeat=None if args.quiet else phase_printer())
    except IsolationUnavailable as error:
        print(f"marathon judge: refusing to run the candidate: {error}", file=sys.stderr)
        return 2
    except RefereeFailure as error:
        print(f"marathon judge: no verdict: {error}", file=sys.stderr)
        return 3
    except (ValueError, ImportError) as error:
        message = str(error)
        if isinstance(error, ImportError) and ":" in args.problem:
            message += (f" (an object path is imported from the current directory and PYTHONPATH: run from the "
                        f"folder that holds {args.problem.partition(':')[0].split('.')[0]!r}, or install its package)")
        elif "known problems" not in message:
            message += f" (known problems: {', '.join(problem_names())})"
        print(f"marathon judge: {message}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print(report.summary())
        if args.ncu:
            print(ncu_lines(report))
    return 0 if report.accepted else 1


def phase_printer():
    """A heartbeat for the judge that prints each new phase once, with the seconds so far, to
    stderr: a judgement of minutes is never silent."""
    import time

    started, last = time.monotonic(), [""]

    def show(phase: str) -> None:
        if phase != last[0]:
            last[0] = phase
            print(f"[{time.monotonic() - started:6.1f} s] {phase}", file=sys.stderr, flush=True)

    return show


def ncu_problem(device: str | None) -> str | None:
    """Why ``--ncu`` cannot run here, checked before a judgement of minutes starts; None if it can."""
    import shutil

    from kernels.judge.runner import has_gpu

    if device == "cpu":
        return "--ncu profiles GPU kernels with Nsight Compute; it cannot be combined with --device cpu " \
            "(the Triton interpreter launches no GPU kernel)"
    if device is None and not has_gpu():
        return "--ncu needs a GPU and this machine has none (no /dev/nvidia0): the judgement would run on the cpu"
    if shutil.which("ncu") is None:
        return "--ncu needs Nsight Compute's ncu on PATH; it was not found"
    return None


def ncu_lines(report) -> str:
    """The ncu profile for people: why or how it was measured, the summary (hottest kernel, speed
    of light, nearest limit, occupancy, registers, spills, top stalls) and every kernel's metrics.
    The judge's summary leaves them out. Informational: never the verdict."""
    from kernels.judge.ncu import summary_text

    lines = [f"ncu: {report.ncu_reason}"]
    if report.ncu:
        lines.append(summary_text(report.ncu))
    return "\n".join(lines)
