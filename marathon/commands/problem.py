"""``marathon problem check NAME|module:OBJECT``: validate a problem of your own before serving it."""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "problem",
        help="check that a problem (yours, by entry point name or module:OBJECT) keeps the contract",
        description="Checks a problem on the CPU: its shape sets, tolerances, roofline formulas, deterministic "
        "inputs, reference (against reference_check when given), baseline, search space (at many points), builds "
        "the bench shapes' inputs and references once, and judges its seed kernel under the Triton interpreter. "
        "Prints one line per check (warn: what passes but deserves a look) and exits 1 when one fails, saying "
        "what is wrong.",
    )
    parser.add_argument("action", choices=("check",), help="what to do: check (the only action)")
    parser.add_argument("name", metavar="NAME|module:OBJECT",
                        help="an installed problem's name (entry point group marathon.problems) or its object path")
    parser.add_argument("--no-judge", action="store_true",
                        help="skip judging the seed kernel (the slowest check: the interpreter runs it)")
    parser.add_argument("--no-bench-build", action="store_true",
                        help="skip building the bench shapes' inputs and references once on the CPU (bounded to "
                        "2 minutes and 4 GiB; shapes beyond are skipped and named)")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument("--insecure-no-isolation", action="store_true",
                        help="judge the seed kernel without the OS sandbox (machines without bubblewrap)")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from kernels.problem_check import check_problem
    from kernels.registry import find_object_paths_here

    find_object_paths_here(args.name)
    findings = check_problem(args.name, run_judge=not args.no_judge, insecure_no_isolation=args.insecure_no_isolation,
                             build_bench=not args.no_bench_build)
    failed = [f for f in findings if not f.ok]
    if args.json:
        print(json.dumps({"problem": args.name, "ok": not failed,
                          "findings": [{"check": f.check, "ok": f.ok, "warning": f.warning, "message": f.message}
                                       for f in findings]},
                         indent=2))
    else:
        for finding in findings:
            print(finding.render())
        print(f"{args.name}: {len(failed)} check(s) failed" if failed else f"{args.name}: every check passed")
    return 1 if failed else 0
