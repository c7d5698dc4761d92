"""How the client commands reach the API: the ``--api-url``/``--home`` options every one of them
takes, the connection, and an API error turned into a message and an exit code.

Exit codes: 0 success, 1 failure (API unreachable, refused, run failed), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Optional


def common_options() -> argparse.ArgumentParser:
    """The options every client command takes (a parent parser)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--api-url", default=None,
        help="the Marathon API (default: the one `marathon up` started on this home, "
        "else MARATHON_API_PORT/127.0.0.1:8000)",
    )
    common.add_argument(
        "--home", type=Path, default=None,
        help="where `marathon up` keeps its token (default: MARATHON_HOME or ~/.marathon)",
    )
    return common


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


def calling_api(function):
    """Run a command body ``function(client, args, *extra)`` with a connected client; turn an
    ``ApiError`` into its message and exit code 1."""

    def handler(args: argparse.Namespace, *extra) -> int:
        from marathon.client import ApiError

        try:
            with connect(args) as client:
                try:
                    return function(client, args, *extra)
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
    handler.__wrapped__ = function  # the body, for tests that bring their own client
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
