"""``marathon soak``: one long run with a fast fake proposer and evaluator, in-process, against
a Temporal dev server, to show that 1,000+ iterations fit (bounded history per segment) and how
fast the loop itself turns. The compaction is the real one; the store writes are counted only.

Prints wall time, iterations/s, events and bytes of history per continued run (segment), and
the worker process's RSS at start, at every tenth of the run and at the end: a plateau after
warm-up is caches filling, a steady climb is a leak.
"""

from __future__ import annotations

import argparse
from typing import NoReturn, Optional


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "soak", help="benchmark the loop: a 1,000-iteration run with fake proposer/evaluator"
    )
    parser.add_argument("--iterations", type=int, default=1000, help="iterations of the run (default 1000)")
    parser.add_argument("--candidates", type=int, default=4, help="candidates per iteration (default 4)")
    parser.add_argument("--continue-as-new-every", type=int, default=100, help="iterations per segment at most")
    parser.add_argument("--notebook-limit", type=int, default=40, help="notebook entries before compaction")
    parser.add_argument(
        "--address", default=None, help="an existing Temporal (host:port); default: start a dev server in a tmp dir"
    )
    parser.set_defaults(handler=soak_command)


def soak_command(args: argparse.Namespace) -> NoReturn:
    import asyncio

    if args.iterations < 1 or args.candidates < 1 or args.continue_as_new_every < 1:
        raise SystemExit("--iterations, --candidates and --continue-as-new-every must be >= 1")
    from marathon.commands.worker import exit_without_teardown

    exit_without_teardown(asyncio.run(soak(args)))


def rss_mib() -> float:
    """Resident memory of this process in MiB (Linux /proc; else the peak from getrusage)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def drifting_score(iteration: int, index: int, confirm: bool) -> tuple[str, Optional[float]]:
    """A run that improves slowly: about 15% of candidates are incorrect, the others' speedup
    grows with the iteration plus a spread, so champions keep changing (and being confirmed)."""
    mix = (iteration * 7919 + index * 104729) % 1000
    if mix < 150:
        return "incorrect", None
    return "ok", 0.8 + iteration / 2000 + mix / 10000


async def soak(args: argparse.Namespace) -> int:
    import contextlib
    import tempfile
    import time
    import uuid
    from pathlib import Path

    from activities.compact import Compactor
    from marathon.local_loop import local_loop
    from marathon.loop_fakes import FakeLoop
    from marathon.settings import Settings
    from marathon.workers import llm_endpoint
    from marathon.temporal_server import DevServer, connect_when_ready
    from workflows.types import Budget, Goal, OptimizeInput, RecordInput

    settings = Settings(_env_file=None)
    rss_every = max(1, args.iterations // 10)
    rss_samples: list[tuple[int, float]] = []

    def sample_rss(request: RecordInput) -> None:
        """(iteration, RSS MiB) when the first attempt of every rss_every-th iteration is recorded."""
        if request.index == 0 and request.iteration % rss_every == 0:
            rss_samples.append((request.iteration, rss_mib()))

    # Fakes that keep nothing per request: what the RSS shows is the loop's own memory.
    fakes = FakeLoop(score=drifting_score, remember=False, on_record=sample_rss)
    async with contextlib.AsyncExitStack() as stack:
        if args.address:
            client = await connect_when_ready(args.address)
            where = args.address
        else:
            home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="marathon-soak-")))
            server = stack.enter_context(DevServer(db_path=home / "temporal.db", log_path=home / "temporal.log"))
            client = await server.connect()
            where = f"dev server {server.address} (SQLite)"
        loop = await stack.enter_async_context(
            local_loop(
                client,
                settings,
                task_queue=f"soak-{uuid.uuid4().hex[:8]}",
                evaluate_queue=f"soak-eval-{uuid.uuid4().hex[:8]}",
                cpu_activities=fakes.cpu_activities(compactor=Compactor(llm_endpoint(settings))),
                evaluate_activities=[fakes.evaluate],
            )
        )
        rss_start = rss_mib()
        run_id = f"soak-{uuid.uuid4().hex[:8]}"
        started = time.perf_counter()
        result = await loop.execute(
            OptimizeInput(
                run_id=run_id,
                problem="soak",
                goal=Goal(target=100.0),
                budget=Budget(iterations=args.iterations, hours=24.0),
                candidates_per_iteration=args.candidates,
                evaluate_task_queue=loop.evaluate_queue,
                continue_as_new_every=args.continue_as_new_every,
                notebook_limit=args.notebook_limit,
            )
        )
        wall = time.perf_counter() - started
        rss_end = rss_mib()
        segments = await history_segments(client, run_id)

    print_report(args, result, where, wall, segments, fakes, (rss_start, rss_end), rss_samples)
    return 0


async def history_segments(client, run_id: str) -> list[tuple[int, int]]:
    """(events, bytes) of each segment of a run's history (one per continue-as-new)."""
    segments = []
    async for run in client.list_workflows(f"WorkflowId = '{run_id}'"):
        description = await client.get_workflow_handle(run_id, run_id=run.run_id).describe()
        info = description.raw_description.workflow_execution_info
        segments.append((description.history_length, info.history_size_bytes))
    return segments


def print_report(args, result, where: str, wall: float, segments: list[tuple[int, int]], fakes,
                 rss: tuple[float, float], rss_samples: list[tuple[int, float]]) -> None:
    events = [length for length, _ in segments]
    sizes = [size for _, size in segments]
    print(f"soak: {result.iterations} iterations x {args.candidates} candidates on {where}")
    print(f"  stop reason        {result.stop_reason}; best {result.best.speedup:.3f}x (iter {result.best.iteration})")
    print(f"  wall time          {wall:.1f} s")
    print(f"  iterations/s       {result.iterations / wall:.2f}")
    evaluations = fakes.evaluation_calls
    print(f"  evaluations/s      {evaluations / wall:.2f} ({evaluations} incl. confirmations)")
    print(f"  attempts recorded  {fakes.record_calls}")
    print(f"  segments           {len(segments)} (continue-as-new every {args.continue_as_new_every} or on suggestion)")
    print(f"  events/segment     min {min(events)}  mean {sum(events) / len(events):.0f}  max {max(events)}")
    print(
        f"  history/segment    max {max(sizes) / 1e6:.2f} MB  (server suggests continue-as-new at 4 MB / 4096 events)"
    )
    print(f"  worker RSS         start {rss[0]:.0f} MiB  end {rss[1]:.0f} MiB")
    samples = "  ".join(f"{iteration}:{value:.0f}" for iteration, value in rss_samples)
    print(f"  RSS by iteration   {samples} (MiB)")
