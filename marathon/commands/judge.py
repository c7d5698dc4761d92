"""``marathon judge FILE --problem NAME``: judge one candidate kernel and print the verdict.

Exit status: 0 accepted, 1 rejected (any status but ``ok``), 2 usage error (missing file,
unknown problem).
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
    parser.add_argument("--problem", required=True, help="problem name (kda, mla-decode) or 'package.module:OBJECT'")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda when present, else cpu")
    parser.add_argument("--seeds", type=int, default=2, help="random input sets per shape (default 2)")
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions per shape")
    parser.add_argument("--confirm", action="store_true", help="more repetitions, as for a new best")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before the judgement is killed")
    parser.add_argument("--json", action="store_true", help="print the full report as JSON")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from kernels.judge import judge
    from kernels.registry import problem_names

    path = Path(args.file)
    if not path.is_file():
        print(f"marathon judge: no such file: {path}", file=sys.stderr)
        return 2
    if args.seeds < 1 or (args.reps is not None and args.reps < 1) or args.timeout <= 0:
        print("marathon judge: --seeds and --reps must be >= 1 and --timeout > 0", file=sys.stderr)
        return 2
    try:
        report = judge(path.read_text(), args.problem, device=args.device, seeds=args.seeds,
                       timing_reps=args.reps, confirm=args.confirm, timeout_s=args.timeout)
    except (ValueError, ImportError) as error:
        message = str(error)
        if "known problems" not in message:
            message += f" (known problems: {', '.join(problem_names())})"
        print(f"marathon judge: {message}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print(report.summary())
    return 0 if report.accepted else 1
