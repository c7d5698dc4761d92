"""Commands that set up a stack: ``marathon up`` (the embedded stack on one machine: Temporal dev
server, API, workers), ``marathon migrate`` (store schema) and ``marathon token`` (an API token)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "up",
        help="start the embedded stack (Temporal dev server, API, workers) and supervise it",
        description=(
            "Start the Temporal dev server (SQLite under the home directory), the API on "
            "127.0.0.1, the CPU worker and one GPU worker per visible GPU (or a CPU-mode "
            "evaluation worker), restart any that die, and stop them all on Ctrl-C. Runs that "
            "were in flight when the stack stopped resume on the next `marathon up`."
        ),
    )
    parser.add_argument(
        "--home", type=Path, default=None, help="state directory (default: MARATHON_HOME or ~/.marathon)"
    )
    parser.add_argument("--api-port", type=int, default=None, help="API port (default: MARATHON_API_PORT or 8000)")
    parser.add_argument(
        "--api-host", default=None,
        help="address the API binds to (default: MARATHON_API_HOST or 127.0.0.1; "
        "other addresses expose it to the network)",
    )
    parser.add_argument("--temporal-port", type=int, default=7233, help="Temporal gRPC port (default: 7233)")
    parser.add_argument(
        "--ui-port", type=int, default=None, help="Temporal Web UI port (default: Temporal port + 1000)"
    )
    parser.add_argument(
        "--gpus", choices=("auto", "none"), default="auto",
        help="auto: one GPU worker per visible GPU; none: CPU mode even when a GPU is present",
    )
    parser.set_defaults(handler=up)

    migrate = subparsers.add_parser(
        "migrate", help="bring the store's schema up to date (DATABASE_URL, else SQLite under the home)"
    )
    migrate.set_defaults(handler=migrate_command)

    token = subparsers.add_parser(
        "token", help="create an API token in the store and print it once (for deployments; `up` makes its own)"
    )
    token.add_argument("--name", required=True, help="who or what the token is for")
    token.set_defaults(handler=token_command)


def up(args: argparse.Namespace) -> int:
    from marathon.devstack import DevStack, StackConfig
    from marathon.settings import get_settings

    settings = get_settings()
    try:
        config = StackConfig(
            home=args.home or settings.home,
            api_host=args.api_host or settings.api_host,
            api_port=args.api_port or settings.api_port,
            temporal_port=args.temporal_port,
            ui_port=args.ui_port or args.temporal_port + 1000,
            gpus=args.gpus,
            database_url=settings.database_url,
            namespace=settings.temporal_namespace,
        )
    except ValueError as error:
        print(f"marathon up: {error}", file=sys.stderr)
        return 2
    return DevStack(config).run()


def migrate_command(args: argparse.Namespace) -> int:
    from marathon.settings import get_settings
    from store.db import upgrade

    upgrade(get_settings().resolved_database_url)
    print("the store's schema is up to date")
    return 0


def token_command(args: argparse.Namespace) -> int:
    from marathon.settings import get_settings
    from store.db import session_scope
    from store.repository import create_token

    with session_scope(get_settings().resolved_database_url) as session:
        token = create_token(session, name=args.name)
    print(token)
    return 0
