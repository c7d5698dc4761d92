"""The ``marathon`` command. Each subcommand lives in ``marathon/commands/<module>.py``
and exposes ``register(subparsers)``; heavy imports happen inside the command itself."""

from __future__ import annotations

import argparse
import importlib
import sys

COMMAND_MODULES = ("up", "client", "judge", "bench", "worker", "soak")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="marathon", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"marathon.commands.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"marathon.commands.{name}":
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
