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
        "notebook and iteration count (--iterations N: N more; no PROBLEM)",
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
        return None if args.problem else "give a PROBLEM (e.g. kda), or --continue RUN_ID"
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


def with_parent(body: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The POST /runs body, with ``from_run`` when --from was given."""
    return {**body, "from_run": args.from_run} if args.from_run else body


def started_text(args: argparse.Namespace) -> str:
    if args.continue_run:
        return f"continues {args.continue_run}"
    return f"{args.problem}, forked from {args.from_run}" if args.from_run else str(args.problem)
