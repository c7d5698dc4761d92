"""``marathon bench scale``: how one run's evaluation throughput grows with its GPU workers.

For each worker count N: N evaluation workers (one evaluation at a time each, as on a GPU) poll
one task queue, and one run with N candidates per iteration and N evaluations in flight goes
through the real workflow on a Temporal dev server. The evaluator is a timed stand-in: each
evaluation holds its worker's stand-in "device" for ``evaluation_s`` seconds (heartbeating, as
the real one does), so the numbers measure the loop's dispatch and what its shape costs, not a
GPU. Reported per N: evaluations (candidates and confirmations), wall time, evaluations per
hour, throughput against N times the one-worker throughput ("efficiency"), each worker's busy
fraction over the run's wall time, each device's busy fraction over the steady-state window read
by the same meter that reads NVML on a GPU (``activities/busy_meter.py``), and the run's event
history in bytes per 100 attempts.

On a machine with several GPUs the same shape runs with the real evaluator through
``marathon up`` (a pinned worker per GPU, ``marathon/gpu_node.py``); this module is the CPU half.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Optional, Sequence, TextIO

from temporalio import activity

from activities.busy_meter import BusyMeter, StandInDevice, steady_window
from workflows.types import EvaluateInput, EvaluateResult

# Heartbeats while an evaluation waits: how soon a cancellation reaches it (as on a GPU worker).
HEARTBEAT_EVERY_S = 0.2


@dataclass
class TimedEvaluator:
    """An "evaluate" activity that holds its worker's stand-in device ``seconds`` and logs when
    (``busy``); ``meter`` reads that device."""

    worker: str
    seconds: float
    busy: list[tuple[float, float]] = field(default_factory=list)
    device: StandInDevice = field(default_factory=StandInDevice)

    def __post_init__(self) -> None:
        self.meter = BusyMeter(self.device.read)

    @activity.defn(name="evaluate")
    async def evaluate(self, input: EvaluateInput) -> EvaluateResult:
        from marathon.commands.soak import drifting_score

        with self.device.hold():
            started = time.monotonic()
            deadline = started + self.seconds
            while (left := deadline - time.monotonic()) > 0:
                activity.heartbeat()
                await asyncio.sleep(min(HEARTBEAT_EVERY_S, left))
            self.busy.append((started, time.monotonic()))
        status, speedup = drifting_score(input.iteration, input.index, input.confirm)
        return EvaluateResult(
            status=status,
            message="" if status == "ok" else f"{status} (timed stand-in on {self.worker})",
            speedup=speedup if status == "ok" else None,
            timing_kind="interpreter",
            gpu_seconds=self.seconds,
            wall_s=self.seconds,
        )


@dataclass
class ScalePoint:
    """One worker count's measurement."""

    workers: int
    iterations: int
    evaluations: int
    wall_s: float
    busy_fractions: list[float]
    # The most evaluations that ran at one moment (N when the loop keeps every worker fed).
    peak_at_once: int
    # Each device's busy fraction over the steady-state window (None: not enough of it read).
    steady_busy: list[Optional[float]] = field(default_factory=list)
    steady_s: float = 0.0
    history_bytes: int = 0

    @property
    def per_hour(self) -> float:
        return self.evaluations / self.wall_s * 3600.0


async def measure(client, settings, workers: int, iterations: int, evaluation_s: float) -> ScalePoint:
    """One run of ``iterations`` x ``workers`` candidates on ``workers`` timed evaluation workers."""
    import contextlib

    from activities.compact import Compactor
    from marathon.local_loop import local_loop
    from marathon.loop_fakes import FakeLoop
    from temporalio.client import Client
    from temporalio.runtime import Runtime, TelemetryConfig

    from marathon.workers import build_gpu_worker, llm_endpoint
    from workflows.types import Budget, Goal, OptimizeInput

    tag = uuid.uuid4().hex[:8]
    queue = f"scale-eval-{tag}"
    fakes = FakeLoop(remember=False)
    evaluators = [TimedEvaluator(f"worker-{index}", evaluation_s) for index in range(workers)]
    async with contextlib.AsyncExitStack() as stack:
        loop = await stack.enter_async_context(
            local_loop(client, settings, task_queue=f"scale-{tag}", evaluate_queue=queue, evaluator=False,
                       cpu_activities=fakes.cpu_activities(compactor=Compactor(llm_endpoint(settings))))
        )
        for evaluator in evaluators:
            # One client and runtime per worker, as each GPU's worker process has in a deployment
            # (the SDK refuses two workers of one queue on one runtime). Device "cpu": one
            # evaluation at a time, as each GPU takes one in this benchmark.
            own = await Client.connect(client.service_client.config.target_host, namespace=client.namespace,
                                       runtime=Runtime(telemetry=TelemetryConfig()),
                                       identity=f"{evaluator.worker}@scale-bench")
            worker = build_gpu_worker(own, settings, "cpu", task_queue=queue, activities=[evaluator.evaluate],
                                      graceful_shutdown_timeout=timedelta(seconds=1))
            await stack.enter_async_context(worker)
        for evaluator in evaluators:
            evaluator.meter.start()
            stack.callback(evaluator.meter.close)
        started = time.monotonic()
        run_id = f"scale-{workers}-{tag}"
        result = await loop.execute(
            OptimizeInput(
                run_id=run_id,
                problem="scale",
                goal=Goal(target=100.0),
                budget=Budget(iterations=iterations, hours=24.0),
                candidates_per_iteration=workers,
                evaluations_in_flight=workers,
                evaluate_task_queue=queue,
            )
        )
        wall = time.monotonic() - started
        history_bytes = await history_size(client, run_id)
    if result.iterations != iterations:
        raise RuntimeError(f"the run stopped after {result.iterations} of {iterations} iterations: "
                           f"{result.stop_reason}")
    busy = [sum(end - begin for begin, end in e.busy) / wall for e in evaluators]
    intervals = [interval for e in evaluators for interval in e.busy]
    window = steady_window(intervals)
    steady = [e.meter.fraction(*window) for e in evaluators] if window else []
    return ScalePoint(workers, result.iterations, len(intervals), wall, busy, peak_at_once(intervals), steady,
                      window[1] - window[0] if window else 0.0, history_bytes)


async def history_size(client, run_id: str) -> int:
    """The bytes of the run's event histories, every continue-as-new segment together."""
    total = 0
    async for run in client.list_workflows(f"WorkflowId = '{run_id}'"):
        history = await client.get_workflow_handle(run_id, run_id=run.run_id).fetch_history()
        total += sum(event.ByteSize() for event in history.events)
    return total


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def steady_text(fractions: Sequence[Optional[float]], combine) -> str:
    """A percentage of the devices' steady busy fractions, "—" when one was not measured."""
    if not fractions or any(f is None for f in fractions):
        return "—"
    return f"{100 * combine(fractions):.1f}"


def peak_at_once(intervals: Sequence[tuple[float, float]]) -> int:
    """The largest number of (start, end) intervals that overlap at one moment."""
    # An end sorts before a start at the same instant: touching intervals do not overlap.
    edges = sorted([(end, -1) for _, end in intervals] + [(start, 1) for start, _ in intervals])
    peak = running = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


async def scale(worker_counts: Sequence[int], iterations: int, evaluation_s: float, out: TextIO,
                address: Optional[str] = None) -> list[ScalePoint]:
    """Measure every worker count on one Temporal (``address``, or a dev server started here) and
    print the table."""
    import contextlib
    import tempfile
    from pathlib import Path

    from marathon.settings import Settings
    from marathon.temporal_server import DevServer, connect_when_ready

    if not worker_counts or min(worker_counts) < 1:
        raise ValueError(f"worker counts must be >= 1, got {list(worker_counts)}")
    if iterations < 1 or evaluation_s <= 0:
        raise ValueError(f"iterations must be >= 1 and the evaluation time > 0 s, got {iterations} and {evaluation_s}")
    settings = Settings(_env_file=None)
    points = []
    async with contextlib.AsyncExitStack() as stack:
        if address:
            client = await connect_when_ready(address)
            where = address
        else:
            home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="marathon-scale-")))
            server = stack.enter_context(DevServer(db_path=home / "temporal.db", log_path=home / "temporal.log"))
            client = await server.connect()
            where = f"dev server {server.address} (SQLite)"
        print(f"scale: {iterations} iterations per run, N candidates per iteration on N workers, each evaluation "
              f"{evaluation_s:g} s (timed stand-in), Temporal {where}", file=out, flush=True)
        print("| workers | evaluations | at once (max) | wall s | evaluations / hour | x one worker | efficiency "
              "| busy min % | busy mean % | steady s | steady busy min % | steady busy mean % "
              "| history bytes / 100 attempts |", file=out)
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|", file=out, flush=True)
        for count in worker_counts:
            point = await measure(client, settings, count, iterations, evaluation_s)
            points.append(point)
            base = next((p for p in points if p.workers == 1), None)
            ratio = point.per_hour / base.per_hour if base else float("nan")
            efficiency = ratio / count if base else float("nan")
            print(f"| {count} | {point.evaluations} | {point.peak_at_once} | {point.wall_s:.1f} | "
                  f"{point.per_hour:.0f} | {ratio:.2f} | "
                  f"{efficiency:.2f} | {100 * min(point.busy_fractions):.1f} | "
                  f"{100 * sum(point.busy_fractions) / count:.1f} | {point.steady_s:.1f} | "
                  f"{steady_text(point.steady_busy, min)} | {steady_text(point.steady_busy, mean)} | "
                  f"{point.history_bytes * 100 / (point.iterations * point.workers):.0f} |", file=out, flush=True)
    return points
