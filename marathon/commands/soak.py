"""``marathon soak``: one long run with a fast fake proposer and evaluator, in-process, against
a Temporal dev server, to show that 1,000+ iterations fit (bounded history per segment) and how
fast the loop itself turns. The compaction is the real one; the store writes are counted only.

Prints wall time, iterations/s, events and bytes of history per continued run (segment), and
the worker process's RSS at start, at every tenth of the run and at the end: a plateau after
warm-up is caches filling, a steady climb is a leak.
"""

# No "from __future__ import annotations": the fake activities are defined inside a function,
# and Temporal reads their (then already evaluated) annotations to decode their arguments.
import argparse
from typing import NoReturn


def register(subparsers) -> None:
    parser = subparsers.add_parser("soak", help="benchmark the loop: a 1,000-iteration run with fake proposer/evaluator")
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


class FakeLoopActivities:
    """Instant stand-ins for the proposer, the judge and the store, under the real names."""

    def __init__(self, rss_every: int = 0) -> None:
        self.evaluations = 0
        self.records = 0
        # (iteration, RSS MiB) sampled when the first attempt of every rss_every-th iteration is recorded.
        self.rss_every = rss_every
        self.rss_samples: list[tuple[int, float]] = []

    def activities(self) -> list:
        from temporalio import activity

        from workflows.types import (
            Candidate,
            EvaluateInput,
            EvaluateResult,
            ProposeInput,
            ProposeResult,
            RecordInput,
            RecordResult,
            RunProgressInput,
            RunProgressResult,
        )

        @activity.defn(name="propose")
        async def propose(request: ProposeInput) -> ProposeResult:
            return ProposeResult(
                candidates=[
                    Candidate(
                        index=index,
                        source_sha=f"{request.iteration:08d}{index:04d}".ljust(64, "0"),
                        strategy=f"knob set {(request.iteration + index) % 7}",
                        knobs={"BT": 16 << (index % 3), "num_warps": 4},
                    )
                    for index in range(request.count)
                ]
            )

        @activity.defn(name="evaluate")
        async def evaluate(request: EvaluateInput) -> EvaluateResult:
            self.evaluations += 1
            mix = (request.iteration * 7919 + request.index * 104729) % 1000
            if mix < 150:
                return EvaluateResult(status="incorrect", message="rel rms 0.31 > 0.02 on T=500", gpu_seconds=0.5)
            speedup = 0.8 + request.iteration / 2000 + mix / 10000
            return EvaluateResult(
                status="ok",
                speedup=speedup,
                timing_kind="fake",
                gpu_seconds=1.0,
                profile={"registers": 96 + request.index, "spills": 0},
            )

        @activity.defn(name="record")
        async def record(request: RecordInput) -> RecordResult:
            self.records += 1
            if self.rss_every and request.index == 0 and request.iteration % self.rss_every == 0:
                self.rss_samples.append((request.iteration, rss_mib()))
            return RecordResult(attempt_id=self.records, created=True)

        @activity.defn(name="record_run")
        async def record_run(request: RunProgressInput) -> RunProgressResult:
            return RunProgressResult(created=request.create is not None)

        return [propose, evaluate, record, record_run]


async def soak(args: argparse.Namespace) -> int:
    import contextlib
    import tempfile
    import time
    import uuid
    from pathlib import Path

    from activities.compact import Compactor
    from marathon.settings import Settings
    from marathon.temporal_server import DevServer, connect_when_ready
    from marathon.workers import build_cpu_worker, build_gpu_worker, llm_endpoint
    from workflows.optimize import OptimizeKernelWorkflow
    from workflows.types import Budget, Goal, OptimizeInput

    settings = Settings(_env_file=None)
    async with contextlib.AsyncExitStack() as stack:
        if args.address:
            client = await connect_when_ready(args.address)
            where = args.address
        else:
            home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="marathon-soak-")))
            server = stack.enter_context(DevServer(db_path=home / "temporal.db", log_path=home / "temporal.log"))
            client = await server.connect()
            where = f"dev server {server.address} (SQLite)"
        fakes = FakeLoopActivities(rss_every=max(1, args.iterations // 10))
        propose, evaluate, record, record_run = fakes.activities()
        queue, evaluate_queue = f"soak-{uuid.uuid4().hex[:8]}", f"soak-eval-{uuid.uuid4().hex[:8]}"
        compact = Compactor(llm_endpoint(settings)).compact
        await stack.enter_async_context(
            build_cpu_worker(client, settings, task_queue=queue, activities=[propose, compact, record, record_run])
        )
        await stack.enter_async_context(
            build_gpu_worker(client, settings, task_queue=evaluate_queue, activities=[evaluate])
        )
        rss_start = rss_mib()
        run_id = f"soak-{uuid.uuid4().hex[:8]}"
        started = time.perf_counter()
        result = await client.execute_workflow(
            OptimizeKernelWorkflow.run,
            OptimizeInput(
                run_id=run_id,
                problem="soak",
                goal=Goal(target=100.0),
                budget=Budget(iterations=args.iterations, hours=24.0),
                candidates_per_iteration=args.candidates,
                evaluate_task_queue=evaluate_queue,
                continue_as_new_every=args.continue_as_new_every,
                notebook_limit=args.notebook_limit,
            ),
            id=run_id,
            task_queue=queue,
        )
        wall = time.perf_counter() - started
        rss_end = rss_mib()
        runs = [run async for run in client.list_workflows(f"WorkflowId = '{run_id}'")]
        segments = []
        for run in runs:
            description = await client.get_workflow_handle(run_id, run_id=run.run_id).describe()
            info = description.raw_description.workflow_execution_info
            segments.append((description.history_length, info.history_size_bytes))

    events = [length for length, _ in segments]
    sizes = [size for _, size in segments]
    print(f"soak: {result.iterations} iterations x {args.candidates} candidates on {where}")
    print(f"  stop reason        {result.stop_reason}; best {result.best.speedup:.3f}x (iter {result.best.iteration})")
    print(f"  wall time          {wall:.1f} s")
    print(f"  iterations/s       {result.iterations / wall:.2f}")
    print(f"  evaluations/s      {fakes.evaluations / wall:.2f} ({fakes.evaluations} incl. confirmations)")
    print(f"  attempts recorded  {fakes.records}")
    print(f"  segments           {len(segments)} (continue-as-new every {args.continue_as_new_every} or on suggestion)")
    print(f"  events/segment     min {min(events)}  mean {sum(events) / len(events):.0f}  max {max(events)}")
    print(f"  history/segment    max {max(sizes) / 1e6:.2f} MB  (server suggests continue-as-new at 4 MB / 4096 events)")
    print(f"  worker RSS         start {rss_start:.0f} MiB  end {rss_end:.0f} MiB")
    samples = "  ".join(f"{iteration}:{rss:.0f}" for iteration, rss in fakes.rss_samples)
    print(f"  RSS by iteration   {samples} (MiB)")
    return 0
