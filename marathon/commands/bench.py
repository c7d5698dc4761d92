"""``marathon bench PROBLEM``: time our kernel against the baselines on this machine's GPU."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    from kernels.bench import add_arguments

    parser = subparsers.add_parser(
        "bench",
        help="check and time our kernel against the baselines, side by side on the GPU",
        description="Per shape: baseline and our milliseconds, speedup, TFLOP/s, GB/s, % of roofline, device. "
        "Refuses (exit 2) without a CUDA GPU.",
    )
    add_arguments(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from kernels.bench import run

    return run(args.problem, args.shapes, args.reps, args.json_path)
