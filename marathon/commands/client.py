"""Client commands on runs that exist: ``runs``, ``show``, ``watch``, ``best``, ``pause``, ``resume``,
``stop``, ``goal`` and ``hint``. They talk to the API that ``marathon up`` (or a deployment) serves.
``run``, which starts one, lives in ``run.py``; how runs are shown, in ``display.py``.

Exit codes: 0 success, 1 failure (API unreachable, refused, run failed), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from marathon.commands.connection import calling_api, common_options, fail
from marathon.commands.display import best_attempt, describe_run, follow, format_speedup, goal_text, iterations_budget
from api.progress import duration, elapsed_s
from workflows.types import OBJECTIVES

ID_HELP = "the run's id, as `marathon run` printed it and `marathon runs` lists it (e.g. kda-1f3c2b9a0d4e)"


def register(subparsers) -> None:
    common = common_options()

    runs = subparsers.add_parser("runs", parents=[common], help="list runs")
    runs.add_argument("--status", default=None, help="running, paused, completed, stopped or failed")
    runs.add_argument("--problem", default=None, help="only runs of this problem, e.g. kda")
    runs.add_argument("--limit", type=int, default=50, help="at most this many runs, newest first (default 50)")
    runs.set_defaults(handler=runs_command)

    show = subparsers.add_parser("show", parents=[common], help="show one run")
    show.add_argument("id", help=ID_HELP)
    show.add_argument("--json", action="store_true", help="print the API's JSON")
    show.set_defaults(handler=show_command)

    watch = subparsers.add_parser("watch", parents=[common], help="follow a run's progress until it ends")
    watch.add_argument("id", help=ID_HELP)
    watch.add_argument("--interval", type=float, default=1.0, help="seconds between polls")
    watch.set_defaults(handler=watch_command)

    best = subparsers.add_parser("best", parents=[common], help="download a run's best kernel")
    best.add_argument("id", help=ID_HELP)
    best.add_argument(
        "-o", "--output", type=Path, required=True, help="file to write the kernel source to; - for standard output"
    )
    best.set_defaults(handler=best_command)

    for action, text in (("pause", "pause a run"), ("resume", "resume a paused run"), ("stop", "stop a run")):
        parser = subparsers.add_parser(action, parents=[common], help=text)
        parser.add_argument("id", help=ID_HELP)
        parser.set_defaults(handler=action_command, action=action)

    goal = subparsers.add_parser("goal", parents=[common], help="change a running run's goal")
    goal.add_argument("id", help=ID_HELP)
    goal.add_argument(
        "target", type=float, help="the new target: a speedup (2.5 for 2.5x) or a roofline fraction (0.6)"
    )
    goal.add_argument(
        "--objective", choices=OBJECTIVES, default=None,
        help="what the target measures (default: keep the run's)",
    )
    goal.set_defaults(handler=goal_command)

    hint = subparsers.add_parser(
        "hint", parents=[common], help="give a running run a hint for its proposer",
        description="Add a hint to a running run's notebook. What its proposer reads of it:\n"
        "  search (the default): knob settings only, e.g. \"chunk=64\" (a knob of the problem's search\n"
        "    space and one of its values: GET /problems lists them); an unknown knob or value is refused\n"
        "  llm: the whole text, e.g. \"try a two-pass scan with the state kept in registers\"\n"
        "The answer says which proposer will read it, or that this run's proposer ignores it.",
    )
    hint.add_argument("id", help=ID_HELP)
    hint.add_argument("text", help="the hint, in quotes: knob settings (search) or free text (llm)")
    hint.set_defaults(handler=hint_command)


@calling_api
def runs_command(client, args: argparse.Namespace) -> int:
    page = client.list_runs(status=args.status, problem=args.problem, limit=args.limit)
    rows = page.get("data", [])
    if not rows:
        if args.status or args.problem:
            print("no runs matching the filter; `marathon runs` without --status/--problem lists them all")
        else:
            print("no runs yet: start one with `marathon run kda --iterations 2` "
                  "(or `./scripts/demo`), then follow it with `marathon watch RUN_ID`")
        return 0
    header = ("ID", "PROBLEM", "STATUS", "PHASE", "ITER", "BEST", "GOAL", "ELAPSED", "CREATED")
    table = [header]
    for run in rows:
        iterations = iterations_budget(run)
        table.append(
            (
                str(run.get("id", "")),
                str(run.get("problem", "")),
                str(run.get("status", "")),
                (str(run.get("waiting_for_worker") or run.get("phase") or "-").split(":")[0])[:32],
                f"{run.get('iteration', 0)}" + (f"/{iterations}" if iterations else ""),
                format_speedup(run.get("best_speedup")),
                goal_text(run.get("goal")),
                duration(elapsed_s(run)),
                str(run.get("created_at", ""))[:19],
            )
        )
    widths = [max(len(row[column]) for row in table) for column in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    count = page.get("count", len(rows))
    if count > len(rows):
        print(f"({len(rows)} of {count} shown; use --limit)")
    return 0


@calling_api
def show_command(client, args: argparse.Namespace) -> int:
    run = client.get_run(args.id)
    if args.json:
        print(json.dumps(run, indent=2, sort_keys=True))
        return 0
    attempts = client.list_attempts(args.id, limit=1000)
    data = attempts.get("data", [])
    best = best_attempt(run, data)
    if best is not None:
        run = {**run, "timing_kind": best.get("timing_kind")}
    print("\n".join(describe_run(run)))
    if data:
        statuses: dict[str, int] = {}
        for attempt in data:
            statuses[attempt.get("status", "?")] = statuses.get(attempt.get("status", "?"), 0) + 1
        summary = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
        print(f"  attempts     {attempts.get('count', len(data))} ({summary})")
    if best is not None:
        print(
            f"  best kernel  iteration {best.get('iteration')}, candidate {best.get('index')}: "
            f"judge status {best.get('status')}, {best.get('strategy') or 'no strategy noted'}"
        )
    return 0


@calling_api
def watch_command(client, args: argparse.Namespace) -> int:
    if args.interval <= 0:
        return fail(f"--interval must be > 0, got {args.interval}")
    try:
        return follow(client, args.id, interval=args.interval)
    except KeyboardInterrupt:
        print("\nstopped watching (the run goes on)")
        return 0


@calling_api
def best_command(client, args: argparse.Namespace) -> int:
    best = client.best(args.id)
    source = best.get("source") or ""
    if not source:
        return fail(f"run {args.id} returned an empty best kernel")
    attempt = best.get("attempt") or {}
    if str(args.output) == "-":
        # The source alone on stdout (for a pipe); what it is goes to stderr.
        sys.stdout.write(source)
        sys.stdout.flush()
        report = sys.stderr
        print(f"the best kernel of run {args.id}", file=report)
    else:
        if args.output.parent and not args.output.parent.exists():
            return fail(f"cannot write {args.output}: the directory {args.output.parent} does not exist")
        args.output.write_text(source)
        report = sys.stdout
        print(f"wrote the best kernel of run {args.id} to {args.output}", file=report)
    print(
        f"  iteration {attempt.get('iteration')}, candidate {attempt.get('index')}: judge status "
        f"{attempt.get('status')}, speedup {format_speedup(attempt.get('speedup'), attempt.get('timing_kind'))}",
        file=report,
    )
    return 0


@calling_api
def action_command(client, args: argparse.Namespace) -> int:
    client.action(args.id, args.action)
    past = {
        "pause": "asked to pause",
        "resume": "asked to resume",
        "stop": "asked to stop: it shows 'stopping' until its current step ends, then 'stopped'",
    }[args.action]
    print(f"run {args.id} {past}")
    return 0


@calling_api
def goal_command(client, args: argparse.Namespace) -> int:
    goal: dict[str, Any] = {"target": args.target}
    if args.objective:
        goal["objective"] = args.objective
    client.set_goal(args.id, goal)
    print(f"run {args.id}: goal set to {goal_text({'objective': args.objective or 'speedup', 'target': args.target})}")
    return 0


@calling_api
def hint_command(client, args: argparse.Namespace) -> int:
    answer = client.add_hint(args.id, args.text)
    note = answer.get("note") if isinstance(answer, dict) else None
    print(f"run {args.id}: hint added" + (f"; {note}" if note else ""))
    return 0
