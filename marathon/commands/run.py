"""``marathon run``: start an optimization run, from flags, a run file (``-f run.toml``) or both.

The body sent to ``POST /runs`` is the run file's, with the flags laid over it key by key; what
neither gives, the API fills in. ``--print-config`` prints that body as a run file and starts nothing.

Exit codes: 0 success, 1 failure (API unreachable, refused, run failed), 2 usage (a bad run file too).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from marathon.commands import lineage
from marathon.commands.connection import calling_api, common_options
from marathon.commands.display import follow, link_lines
from workflows.types import OBJECTIVES, PROPOSER_KINDS


def register(subparsers) -> None:
    run = subparsers.add_parser("run", parents=[common_options()], help="start an optimization run")
    run.add_argument(
        "problem", nargs="?", default=None, help="problem name, e.g. kda or mla-decode (or in the run file)"
    )
    run.add_argument(
        "-f", "--file", type=Path, default=None, metavar="RUN_FILE",
        help="a run file: any field of POST /runs in TOML (see README, Run files); flags override it",
    )
    run.add_argument(
        "--print-config", action="store_true",
        help="print the run this would start, as a run file (file and flags merged), and exit without starting it",
    )
    run.add_argument(
        "--goal", type=float, default=None, help="target value: speedup (e.g. 2.0) or roofline fraction (e.g. 0.6)"
    )
    run.add_argument(
        "--objective", choices=OBJECTIVES, default=None, help="what the goal measures (default: speedup)"
    )
    run.add_argument("--iterations", type=int, default=None, help="iteration budget")
    run.add_argument("--hours", type=float, default=None, help="wall-clock budget in hours")
    run.add_argument(
        "--proposer", choices=PROPOSER_KINDS, default=None, help="who writes candidates (default: search)"
    )
    run.add_argument("--candidates", type=int, default=None, help="candidates per iteration")
    run.add_argument("--seed", type=int, default=None, help="proposer seed")
    # Flags that start a run from another one: continue it with more budget, or fork its best kernel.
    lineage.add_flags(run)
    run.add_argument("--wait", action="store_true", help="watch the run until it ends")
    run.set_defaults(handler=run_command, usage_error=run.error)


def flag_body(args: argparse.Namespace) -> dict[str, Any]:
    """The part of the POST /runs body given on the command line (only what was given)."""
    body: dict[str, Any] = {}
    if args.problem is not None:
        body["problem"] = args.problem
    goal = {key: value for key, value in (("objective", args.objective), ("target", args.goal)) if value is not None}
    if goal:
        body["goal"] = goal
    budget = {
        key: value for key, value in (("iterations", args.iterations), ("hours", args.hours)) if value is not None
    }
    if budget:
        body["budget"] = budget
    proposer = {key: value for key, value in (("kind", args.proposer), ("seed", args.seed)) if value is not None}
    if proposer:
        body["proposer"] = proposer
    if args.candidates is not None:
        body["candidates_per_iteration"] = args.candidates
    if args.from_run is not None:
        body["from_run"] = args.from_run
    return body


def run_body(args: argparse.Namespace) -> dict[str, Any]:
    """The POST /runs body: the run file's (if any) with the flags laid over it; the API fills in
    what neither gives. Raises ``RunFileError`` for a run file that cannot be read or is wrong."""
    from marathon.commands.run_file import load_run_file, merge

    from_file = load_run_file(args.file) if args.file is not None else {}
    return merge(from_file, flag_body(args))


def run_command(args: argparse.Namespace) -> int:
    from marathon.commands.run_file import RunFileError, to_toml

    lineage.check_usage(args)
    if args.continue_run is not None:
        return continue_run(args)
    try:
        body = run_body(args)
    except RunFileError as error:
        for line in error.lines:
            print(f"marathon: {line}", file=sys.stderr)
        return 2
    if "problem" not in body:
        where = f'problem = "kda" in {args.file}' if args.file is not None else "a run file with problem = ..."
        args.usage_error(f"which problem? give it as `marathon run PROBLEM`, or {where}")
    if args.print_config:
        sys.stdout.write(to_toml(body))
        return 0
    return start_run(args, body)


@calling_api
def start_run(client, args: argparse.Namespace, body: dict[str, Any]) -> int:
    run = client.create_run(body)
    parent = f", forked from {body['from_run']}" if body.get("from_run") else ""
    return started(client, args, run, f"{body['problem']}{parent}")


@calling_api
def continue_run(client, args: argparse.Namespace) -> int:
    run = client.continue_run(args.continue_run, lineage.continue_body(args))
    note = ""
    if args.iterations is None:
        total = (run.get("budget") or {}).get("iterations")
        note = (f"  budget       no --iterations given: run {args.continue_run}'s iteration budget again, so up to "
                f"{total} iterations in all, counting its own; `--iterations N` gives N more instead")
    return started(client, args, run, f"continues {args.continue_run}", note)


def started(client, args: argparse.Namespace, run: dict[str, Any], what: str, note: str = "") -> int:
    run_id = run["id"]
    print(f"started run {run_id} ({what})")
    for line in link_lines(run) + ([note] if note else []):
        print(line)
    if not args.wait:
        print(f"  follow it with: marathon watch {run_id}")
        return 0
    return follow(client, run_id, interval=1.0)
