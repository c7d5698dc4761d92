"""``marathon run --continue RUN_ID`` and ``marathon run PROBLEM --from RUN_ID``: the flags, their
checks and the request bodies (POST /runs/{id}/continue, POST /runs with ``from_run``)."""

from __future__ import annotations

import argparse
from typing import Any, Optional

# What a continued run takes from its parent, so these flags make no sense with --continue.
PARENT_SETTINGS = (("proposer", "--proposer"), ("candidates", "--candidates"), ("seed", "--seed"))


def add_flags(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--continue", dest="continue_run", metavar="RUN_ID", default=None,
        help="give a finished, stopped or failed run more budget: a new run goes on from its best kernel, "
        "notebook and iteration count (--iterations N: N more; without it, the parent's iteration budget "
        "again; no PROBLEM)",
    )
    run.add_argument(
        "--from", dest="from_run", metavar="RUN_ID", default=None,
        help="fork a run: start from its best kernel and notebook with this command's own goal and budget "
        "(PROBLEM must be the parent's)",
    )
    # So a bad combination gets argparse's usage line and exit code 2, like any usage error.
    run.set_defaults(run_parser=run)


def check_usage(args: argparse.Namespace) -> None:
    """Exit 2 with the usage line when the arguments do not go together."""
    problem = usage_error(args)
    if problem:
        args.run_parser.error(problem)


def usage_error(args: argparse.Namespace) -> Optional[str]:
    """What is wrong with the combination of arguments; None when it can be sent."""
    if args.continue_run is None:
        return None  # a new run: its problem may come from the flags or a run file (run.py checks)
    if getattr(args, "file", None) is not None:
        return f"--continue takes run {args.continue_run}'s settings: a run file (-f) describes a new run"
    if getattr(args, "print_config", False):
        return "--print-config prints a new run's file; --continue has none (it takes its parent's settings)"
    if args.from_run is not None:
        return "--continue and --from do not go together: --continue goes on with a run, --from forks one"
    if args.problem:
        return f"--continue takes the problem from run {args.continue_run}: leave out {args.problem!r}"
    given = [flag for name, flag in PARENT_SETTINGS if getattr(args, name, None) is not None]
    if given:
        return f"--continue keeps run {args.continue_run}'s {', '.join(given)}: fork it with --from to change them"
    return None


def continue_body(args: argparse.Namespace) -> dict[str, Any]:
    """The POST /runs/{id}/continue body: only what was given; the API takes the rest from the parent."""
    body: dict[str, Any] = {key: value for key, value in (("iterations", args.iterations), ("hours", args.hours))
                            if value is not None}
    if args.goal is not None:
        body["goal"] = {"target": args.goal, **({"objective": args.objective} if args.objective else {})}
    return body
