"""Client commands: ``run``, ``runs``, ``show``, ``watch``, ``best``, ``pause``, ``resume``, ``stop``,
``goal`` and ``hint``. They talk to the API that ``marathon up`` (or a deployment) serves.

Exit codes: 0 success, 1 failure (API unreachable, refused, run failed), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

from marathon.progress import candidates_line, duration, elapsed_s, time_line
from workflows.types import FINISHED_RUN_STATUSES, OBJECTIVES, Goal

FINISHED = FINISHED_RUN_STATUSES
ID_HELP = "the run's id, as `marathon run` printed it and `marathon runs` lists it (e.g. kda-1f3c2b9a0d4e)"
LINKS = (("run page", "run_page_url"), ("Temporal UI", "temporal_url"))


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--api-url", default=None,
        help="the Marathon API (default: the one `marathon up` started on this home, else MARATHON_API_PORT/127.0.0.1:8000)",
    )
    common.add_argument("--home", type=Path, default=None, help="where `marathon up` keeps its token (default: MARATHON_HOME or ~/.marathon)")
    return common


def register(subparsers) -> None:
    common = _common()

    run = subparsers.add_parser("run", parents=[common], help="start an optimization run")
    run.add_argument("problem", help="problem name, e.g. kda or mla-decode")
    run.add_argument("--goal", type=float, default=None, help="target value: speedup (e.g. 2.0) or roofline fraction (e.g. 0.6)")
    run.add_argument("--objective", choices=OBJECTIVES, default=None, help="what the goal measures (default: speedup)")
    run.add_argument("--iterations", type=int, default=None, help="iteration budget")
    run.add_argument("--hours", type=float, default=None, help="wall-clock budget in hours")
    run.add_argument("--proposer", choices=("search", "llm"), default=None, help="who writes candidates (default: search)")
    run.add_argument("--candidates", type=int, default=None, help="candidates per iteration")
    run.add_argument("--seed", type=int, default=None, help="proposer seed")
    run.add_argument("--wait", action="store_true", help="watch the run until it ends")
    run.set_defaults(handler=run_command)

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
    goal.add_argument("target", type=float, help="the new target: a speedup (2.5 for 2.5x) or a roofline fraction (0.6)")
    goal.add_argument(
        "--objective", choices=OBJECTIVES, default=None, help="what the target measures (default: keep the run's)"
    )
    goal.set_defaults(handler=goal_command)

    hint = subparsers.add_parser("hint", parents=[common], help="give a running run a hint for its proposer")
    hint.add_argument("id", help=ID_HELP)
    hint.add_argument("text", help="the hint, in quotes; it goes into the run's notebook for the proposer")
    hint.set_defaults(handler=hint_command)


def resolve_api_url(args: argparse.Namespace, home: Path) -> str:
    """--api-url, else the stack `marathon up` wrote for this home, else the settings."""
    from marathon.devstack import STACK_FILE_NAME
    from marathon.settings import get_settings

    if args.api_url:
        return args.api_url
    explicit = any(name in os.environ for name in ("MARATHON_PUBLIC_URL", "MARATHON_API_PORT", "MARATHON_API_HOST"))
    stack_file = home / STACK_FILE_NAME
    if not explicit and stack_file.exists():
        try:
            return json.loads(stack_file.read_text())["api_url"]
        except (ValueError, KeyError):
            pass
    return get_settings().api_url


def connect(args: argparse.Namespace):
    from marathon.client import MarathonClient, read_token
    from marathon.settings import get_settings

    home = Path(args.home or get_settings().home).expanduser()
    return MarathonClient(resolve_api_url(args, home), read_token(home), home=home)


def fail(message: str) -> int:
    print(f"marathon: {message}", file=sys.stderr)
    return 1


def _calling(function):
    """Run a command body; turn an ``ApiError`` into its message and exit code 1."""

    def handler(args: argparse.Namespace) -> int:
        from marathon.client import ApiError

        try:
            with connect(args) as client:
                try:
                    return function(client, args)
                except ApiError as error:
                    unknown = unknown_run_message(client, args, error)
                    if unknown is None:
                        raise
                    return fail(unknown)
        except ApiError as error:
            return fail(str(error))
        except KeyboardInterrupt:
            print("\ninterrupted (a run goes on: `marathon stop ID` stops it)", file=sys.stderr)
            return 130
        except BrokenPipeError:
            # The reader went away (`marathon runs | head`): not an error worth a traceback.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0

    handler.__name__ = function.__name__
    handler.__doc__ = function.__doc__
    return handler


def unknown_run_message(client, args: argparse.Namespace, error) -> Optional[str]:
    """For a 404 on an unknown run id: say so, point at `marathon runs`, and suggest the known
    ids that start with what was typed. None for any other error."""
    from marathon.client import ApiError

    run_id = getattr(args, "id", None)
    if not run_id or error.status != 404 or not str(error).endswith(f"run {run_id} not found"):
        return None
    message = f"no run {run_id}; see `marathon runs`"
    try:
        known = [run.get("id", "") for run in client.list_runs(limit=1000).get("data", [])]
    except ApiError:
        return message
    close = [known_id for known_id in known if known_id.startswith(run_id)][:3]
    if close:
        message += " (did you mean " + " or ".join(close) + "?)"
    return message


def format_speedup(value: Optional[float], timing_kind: Optional[str] = None) -> str:
    if value is None:
        return "-"
    text = f"{value:.3g}x"
    if timing_kind and timing_kind != "gpu":
        text += f" ({timing_kind} timing)"
    return text


def _goal_text(goal: Any) -> str:
    """The goal as the API returned it, written by ``Goal.format_target``; what is not a goal, as it is."""
    if isinstance(goal, dict):
        target = goal.get("target")
        if isinstance(target, (int, float)) and not isinstance(target, bool):
            return Goal(objective=str(goal.get("objective", "speedup")), target=float(target)).format_target()
        return str(target)
    return "-" if goal is None else str(goal)


def _timing_kind(run: dict[str, Any]) -> Optional[str]:
    best = run.get("best")
    if isinstance(best, dict) and best.get("timing_kind"):
        return best["timing_kind"]
    return run.get("timing_kind")


def _iterations_budget(run: dict[str, Any]) -> Optional[int]:
    budget = run.get("budget")
    return budget.get("iterations") if isinstance(budget, dict) else None


def run_body(args: argparse.Namespace) -> dict[str, Any]:
    """The POST /runs body: only what was given on the command line; the API fills in defaults."""
    body: dict[str, Any] = {"problem": args.problem}
    goal = {key: value for key, value in (("objective", args.objective), ("target", args.goal)) if value is not None}
    if goal:
        body["goal"] = goal
    budget = {key: value for key, value in (("iterations", args.iterations), ("hours", args.hours)) if value is not None}
    if budget:
        body["budget"] = budget
    proposer = {key: value for key, value in (("kind", args.proposer), ("seed", args.seed)) if value is not None}
    if proposer:
        body["proposer"] = proposer
    if args.candidates is not None:
        body["candidates_per_iteration"] = args.candidates
    return body


@_calling
def run_command(client, args: argparse.Namespace) -> int:
    run = client.create_run(run_body(args))
    run_id = run["id"]
    print(f"started run {run_id} ({args.problem})")
    for label, key in LINKS:
        if run.get(key):
            print(f"  {label:12} {run[key]}")
    if not args.wait:
        print(f"  follow it with: marathon watch {run_id}")
        return 0
    return follow(client, run_id, interval=1.0)


@_calling
def runs_command(client, args: argparse.Namespace) -> int:
    page = client.list_runs(status=args.status, problem=args.problem, limit=args.limit)
    rows = page.get("data", [])
    if not rows:
        print("no runs" + (" matching the filter" if args.status or args.problem else ""))
        return 0
    header = ("ID", "PROBLEM", "STATUS", "PHASE", "ITER", "BEST", "GOAL", "ELAPSED", "CREATED")
    table = [header]
    for run in rows:
        iterations = _iterations_budget(run)
        table.append(
            (
                str(run.get("id", "")),
                str(run.get("problem", "")),
                str(run.get("status", "")),
                ("waiting for a GPU worker" if run.get("waiting_for_worker") else str(run.get("phase") or "-"))[:32],
                f"{run.get('iteration', 0)}" + (f"/{iterations}" if iterations else ""),
                format_speedup(run.get("best_speedup")),
                _goal_text(run.get("goal")),
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


def describe_run(run: dict[str, Any]) -> list[str]:
    iterations = _iterations_budget(run)
    lines = [
        f"run {run.get('id')}  {run.get('problem')}  {run.get('status')}",
    ]
    if run.get("phase"):
        lines.append(f"  phase        {run['phase']}")
    lines += [
        f"  iteration    {run.get('iteration', 0)}" + (f" of {iterations}" if iterations else ""),
        f"  best         {format_speedup(run.get('best_speedup'), _timing_kind(run))}",
        f"  goal         {_goal_text(run.get('goal'))}",
    ]
    if run.get("distance") is not None:
        lines.append(f"  distance     {run['distance']:.3f} (fraction of the goal still missing)")
    used = run.get("budget_used")
    if isinstance(used, dict) and used:
        lines.append("  budget used  " + ", ".join(f"{key} {value:g}" if isinstance(value, (int, float)) else f"{key} {value}" for key, value in used.items()))
    if time_line(run):
        lines.append(f"  time         {time_line(run)}")
    if candidates_line(run):
        lines.append(f"  candidates   {candidates_line(run)}")
    if run.get("waiting_for_worker"):
        lines.append(f"  WAITING      {run['waiting_for_worker']}")
    if run.get("stop_reason"):
        label = {"paused": "paused", "failed": "failed"}.get(run.get("status"), "stop reason")
        lines.append(f"  {label:12} {run['stop_reason']}")
    if run.get("waiting_for"):
        lines.append(f"  waiting for  {run['waiting_for']}")
    for label, key in LINKS:
        if run.get(key):
            lines.append(f"  {label:12} {run[key]}")
    return lines


def best_attempt(run: dict[str, Any], attempts: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The attempt that holds the run's best kernel, if it is among ``attempts``."""
    for attempt in attempts:
        if run.get("best_attempt_id") is not None and attempt.get("id") == run["best_attempt_id"]:
            return attempt
    best = [attempt for attempt in attempts if attempt.get("is_best")]
    return best[-1] if best else None


@_calling
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


def _candidate_counts(run: dict[str, Any]) -> str:
    """``candidates 2 ok, 1 evaluating``: the current iteration's candidates by state."""
    rows = run.get("candidates")
    if not isinstance(rows, list) or not rows:
        return ""
    counts: dict[str, int] = {}
    for row in rows:
        state = str(row.get("state", "?")) if isinstance(row, dict) else "?"
        state = "waiting for a GPU worker" if state.startswith("waiting for a GPU worker") else state
        counts[state] = counts.get(state, 0) + 1
    return "candidates " + ", ".join(f"{count} {state}" for state, count in counts.items())


def progress_line(run: dict[str, Any], width: int = 24, *, with_time: bool = True) -> str:
    """One line on a run: the bar, best, goal, status (phase), then what is known of time left,
    the candidates in flight and a wait for a worker."""
    iteration = int(run.get("iteration") or 0)
    total = _iterations_budget(run)
    if total:
        filled = min(width, int(width * iteration / total))
        bar = "[" + "#" * filled + "-" * (width - filled) + f"] {iteration}/{total}"
    else:
        bar = f"iteration {iteration}"
    line = (
        f"{bar}  best {format_speedup(run.get('best_speedup'), _timing_kind(run))}"
        f"  goal {_goal_text(run.get('goal'))}  {run.get('status', '?')}"
    )
    if run.get("phase") and run.get("phase") != run.get("status"):
        line += f" ({run['phase']})"
    extras = [time_line(run) if with_time else "", _candidate_counts(run)]
    if run.get("waiting_for_worker"):
        extras.append(str(run["waiting_for_worker"]))
    return "  ".join([line] + [extra for extra in extras if extra])


def follow(client, run_id: str, *, interval: float, out=None) -> int:
    """Poll the run until it ends; a live line on a terminal, one line per change otherwise."""
    out = out or sys.stdout
    live = out.isatty()
    last = None
    try:
        while True:
            run = client.get_run(run_id)
            line = progress_line(run)
            # A pipe gets a line when something other than the clock changed.
            key = progress_line(run, with_time=False)
            if live:
                out.write("\r\033[K" + line)
                out.flush()
            elif key != last:
                print(line, file=out, flush=True)
            last = key
            status = run.get("status")
            if status in FINISHED:
                if live:
                    out.write("\n")
                reason = f" ({run['stop_reason']})" if run.get("stop_reason") else ""
                print(f"run {run_id} {status}{reason}", file=out, flush=True)
                return 1 if status == "failed" else 0
            time.sleep(interval)
    except Exception:
        # A poll that fails (the API went away) must not leave the error message glued to the
        # end of the live bar: close the bar's line first. (Ctrl-C is not an Exception; its
        # handlers start their own line.)
        if live and last is not None:
            out.write("\n")
            out.flush()
        raise


@_calling
def watch_command(client, args: argparse.Namespace) -> int:
    if args.interval <= 0:
        return fail(f"--interval must be > 0, got {args.interval}")
    try:
        return follow(client, args.id, interval=args.interval)
    except KeyboardInterrupt:
        print("\nstopped watching (the run goes on)")
        return 0


@_calling
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


@_calling
def action_command(client, args: argparse.Namespace) -> int:
    client.action(args.id, args.action)
    past = {"pause": "asked to pause", "resume": "asked to resume", "stop": "asked to stop"}[args.action]
    print(f"run {args.id} {past}")
    return 0


@_calling
def goal_command(client, args: argparse.Namespace) -> int:
    goal: dict[str, Any] = {"target": args.target}
    if args.objective:
        goal["objective"] = args.objective
    client.set_goal(args.id, goal)
    print(f"run {args.id}: goal set to {_goal_text({'objective': args.objective or 'speedup', 'target': args.target})}")
    return 0


@_calling
def hint_command(client, args: argparse.Namespace) -> int:
    answer = client.add_hint(args.id, args.text)
    note = answer.get("note") if isinstance(answer, dict) else None
    print(f"run {args.id}: hint added" + (f"; {note}" if note else ""))
    return 0
