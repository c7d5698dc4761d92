"""``marathon bench PROBLEM``: time our kernel against the baselines on this machine's GPU.
``marathon bench judge``: time whole judgements of the seeds, phase by phase (marathon/judge_bench.py).
``marathon bench scale``: a run's evaluation throughput against its worker count (marathon/scale_bench.py).
``marathon bench agent``: what the agent proposer's durable steps cost (marathon/agent_bench.py)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    from kernels.bench import add_arguments

    parser = subparsers.add_parser(
        "bench",
        help="time our kernel against the baselines on the GPU; `bench judge`: time judgements",
        description="Per shape: baseline and our milliseconds, speedup, TFLOP/s, GB/s, % of roofline, device. "
        "Refuses (exit 2) without a CUDA GPU.",
    )
    add_arguments(parser)
    parser.set_defaults(handler=handle)

    judge = parser.add_argument_group(
        "marathon bench judge",
        "With PROBLEM = judge: judge each problem's seed kernel --runs times one after another, then --concurrent "
        "at once (sharing the GPU through the lease, as a GPU worker does), and print the wall time of each phase. "
        "Runs on the CPU too (interpreter), where the numbers say nothing about a GPU.")
    judge.add_argument("--problem", action="append", dest="problems", default=None,
                       help="a problem to judge (repeatable; default: kda and mla-decode)")
    judge.add_argument("--runs", type=int, default=2, help="judgements one after another (default 2)")
    judge.add_argument("--concurrent", type=int, default=0, help="then this many at once (default 0: none)")
    judge.add_argument("--fresh-cache", action="store_true",
                       help="start each problem from empty Triton and inductor caches (a new worker)")
    judge.add_argument("--fresh-referees", action="store_true",
                       help="start a new referee for every judgement instead of keeping them as a worker does "
                       "(each judgement then warms its baseline again)")
    judge.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda when present")
    judge.add_argument("--insecure-no-isolation", action="store_true",
                       help="judge without OS isolation where bubblewrap is missing")

    scale = parser.add_argument_group(
        "marathon bench scale",
        "With PROBLEM = scale: for each worker count N, one run of --iterations iterations with N candidates "
        "each on N evaluation workers (one evaluation at a time each), through the real workflow on a Temporal "
        "dev server, with a timed stand-in evaluator; prints evaluations per hour, efficiency against N x one "
        "worker, and each worker's busy fraction.")
    scale.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8], help="worker counts (default 1 2 4 8)")
    scale.add_argument("--iterations", type=int, default=10, help="iterations per run (default 10)")
    scale.add_argument("--evaluation-s", type=float, default=5.0, help="seconds each evaluation holds its worker "
                       "(default 5)")
    scale.add_argument("--address", default=None, help="an existing Temporal (host:port); default: a dev server")

    agent = parser.add_argument_group(
        "marathon bench agent",
        "With PROBLEM = agent: --candidates agent conversations of --tool-calls tool calls each through the real "
        "workflow and agent activities on a Temporal dev server, against a scripted model over HTTP; prints per "
        "candidate its model and tool calls, tokens, wall time and the overhead per durable step in ms.")
    agent.add_argument("--tool-calls", type=int, default=20, help="tool calls per conversation (default 20)")
    agent.add_argument("--candidates", type=int, default=2, help="conversations (default 2)")
    agent.add_argument("--tools", default="read_problem",
                       help="tools the scripted model calls in turn, comma-separated (default read_problem; "
                       "compile,run,time,ncu run the judge on the problem's seed kernel)")


def handle_judge(args: argparse.Namespace) -> int:
    import sys

    from kernels.judge.isolation import IsolationUnavailable
    from marathon.judge_bench import run
    from marathon.settings import get_settings

    if args.runs < 1 or args.concurrent < 0:
        print("marathon bench judge: --runs must be >= 1 and --concurrent >= 0", file=sys.stderr)
        return 2
    try:
        return run(args.problems or ["kda", "mla-decode"], runs=args.runs, concurrent=args.concurrent,
                   device=args.device, fresh_cache=args.fresh_cache, json_path=args.json_path,
                   insecure=args.insecure_no_isolation, keep_referees=not args.fresh_referees,
                   lease_path=get_settings().gpu_lease)
    except IsolationUnavailable as error:
        print(f"marathon bench judge: refusing to run candidates: {error}", file=sys.stderr)
        return 2
    except ValueError as error:
        print(f"marathon bench judge: {error}", file=sys.stderr)
        return 2


def handle_scale(args: argparse.Namespace) -> int:
    import asyncio
    import sys

    from marathon.scale_bench import scale

    try:
        asyncio.run(scale(args.workers, args.iterations, args.evaluation_s, sys.stdout, address=args.address))
    except ValueError as error:
        print(f"marathon bench scale: {error}", file=sys.stderr)
        return 2
    return 0


def handle_agent(args: argparse.Namespace) -> int:
    import sys

    from marathon.agent_bench import run

    try:
        tools = tuple(name.strip() for name in args.tools.split(",") if name.strip())
        return run(args.tool_calls, args.candidates, sys.stdout, tools, args.device)
    except ValueError as error:
        print(f"marathon bench agent: {error}", file=sys.stderr)
        return 2


def handle(args: argparse.Namespace) -> int:
    from kernels.bench import run

    if args.problem == "judge":
        return handle_judge(args)
    if args.problem == "scale":
        return handle_scale(args)
    if args.problem == "agent":
        return handle_agent(args)

    return run(args.problem, args.shapes, args.reps, args.json_path, graph_all=args.graph_all)
