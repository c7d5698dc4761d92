"""The ``marathon`` command. Each subcommand lives in ``marathon/commands/<module>.py``
and exposes ``register(subparsers)``; heavy imports happen inside the command itself.
``EXAMPLES`` gives every subcommand's ``--help`` an example (tests/cli/test_help.py checks it)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

COMMAND_MODULES = ("up", "run", "client", "judge", "bench", "problem", "worker", "soak")

DESCRIPTION = (
    "Marathon optimizes GPU kernels over long horizons (hundreds of write, judge, profile, improve\n"
    "iterations), durably, on Temporal. Start the stack with `marathon up`, then start and steer runs."
)

# One or more example command lines per subcommand, shown at the end of its --help.
EXAMPLES: dict[str, tuple[str, ...]] = {
    "up": ("marathon up", "marathon up --home /data/marathon --api-port 8001 --gpus none"),
    "migrate": ("marathon migrate", "DATABASE_URL=postgresql://marathon@db/marathon marathon migrate"),
    "token": ("marathon token --name alice",),
    "run": (
        "marathon run kda --goal 2 --iterations 200 --hours 24 --candidates 4",
        "marathon run mla-decode --proposer llm --goal 1.5 --wait",
        "marathon run -f run.toml --iterations 50",
        "marathon run kda --goal 2 --print-config > run.toml",
    ),
    "runs": ("marathon runs", "marathon runs --status running --problem kda"),
    "show": ("marathon show kda-1f3c2b9a0d4e", "marathon show kda-1f3c2b9a0d4e --json"),
    "watch": ("marathon watch kda-1f3c2b9a0d4e",),
    "best": ("marathon best kda-1f3c2b9a0d4e -o best.py", "marathon best kda-1f3c2b9a0d4e -o - | less"),
    "pause": ("marathon pause kda-1f3c2b9a0d4e",),
    "resume": ("marathon resume kda-1f3c2b9a0d4e",),
    "stop": ("marathon stop kda-1f3c2b9a0d4e",),
    "goal": ("marathon goal kda-1f3c2b9a0d4e 2.5", "marathon goal kda-1f3c2b9a0d4e 0.6 --objective roofline"),
    "hint": ('marathon hint kda-1f3c2b9a0d4e "try a larger chunk size"',),
    "judge": ("marathon judge my_kernel.py --problem kda", "marathon judge my_kernel.py --problem mla-decode --json"),
    "bench": ("marathon bench mla-decode", "marathon bench kda",
              "marathon bench judge --problem kda --runs 3 --concurrent 4 --fresh-cache"),
    "problem": (
        "marathon problem check rmsnorm-residual",
        "marathon problem check my_package.definition:PROBLEM --no-judge",
    ),
    "worker": ("marathon worker cpu", "CUDA_VISIBLE_DEVICES=0 marathon worker gpu"),
    "soak": ("marathon soak",),
}


def _one_line_formatter(prog: str) -> argparse.HelpFormatter:
    # Wide enough that each command's summary stays on one line.
    return argparse.RawDescriptionHelpFormatter(prog, width=160, max_help_position=14)


def _decorate(name: str, parser: argparse.ArgumentParser, summary: str) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    if not parser.description:
        parser.description = summary[:1].upper() + summary[1:] + "."
    examples = EXAMPLES.get(name)
    if examples and not parser.epilog:
        parser.epilog = "example" + ("s" if len(examples) > 1 else "") + ":\n" + "\n".join(f"  {e}" for e in examples)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="marathon",
        usage="marathon COMMAND [options]   (marathon COMMAND --help: its options and an example)",
        description=DESCRIPTION,
        epilog="examples:\n  marathon up\n  marathon run kda --goal 2 --iterations 200\n  marathon runs\n"
        "  marathon show RUN_ID\n\n"
        "Docs: README.md; the API's own at http://127.0.0.1:8000/docs once `marathon up` runs.",
        formatter_class=_one_line_formatter,
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands", prog="marathon")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"marathon.commands.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"marathon.commands.{name}":
                raise
            continue
        module.register(subparsers)
    summaries = {action.dest: action.help or "" for action in subparsers._choices_actions}
    for name, sub in subparsers.choices.items():
        _decorate(name, sub, summaries.get(name, ""))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        code = int(args.handler(args) or 0)
        sys.stdout.flush()  # a pipe's buffered output: the reader may have gone, said here, not at exit
        return code
    except BrokenPipeError:
        return _reader_went_away()


def _reader_went_away() -> int:
    """The reader of our output closed it (``marathon judge ... | head``): stop quietly, as a
    command in a pipeline does. Standard output is pointed at /dev/null so the interpreter's
    final flush does not raise the same error again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141  # 128 + SIGPIPE, what a shell reports for a command the pipe closed on


if __name__ == "__main__":
    sys.exit(main())
