"""The store's PostgreSQL crashes mid-run and comes back: the run completes and loses nothing.

A private cluster (``private_postgres.py``) holds the store. At iteration 2 the database is
stopped in immediate mode (no clean shutdown), the iteration goes on so its ``record`` fails
against the dead server, and the database starts again seconds later. The workflow's store
retry policy has no attempt limit, so the record is retried until it lands: every
(iteration, index) is then in the store and in the notebook exactly once, the best is that of
an undisturbed run, and the history shows a record activity that needed more than one attempt.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from activities.record import Recorder
from store.db import dispose_engine, upgrade
from tests.loop_fixtures import loop_input, loop_workers, unique_queue
from tests.reliability.private_postgres import PrivatePostgres, missing_reason
from tests.reliability.test_crashes import (
    CANDIDATES,
    GOAL,
    ITERATIONS,
    HoldProposal,
    best_of,
    expected_keys,
    notebook_keys,
    stored,
    undisturbed_best,
    used_gpu_seconds,
)
from workflows.optimize import OptimizeKernelWorkflow
from workflows.types import Budget

DOWN_S = 4.0


@pytest.fixture
def postgres():
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    # Not under pytest's tmp_path: its folders are private to this user, and the postmaster
    # may run as another (postgres, when the tests run as root).
    folder = Path(tempfile.mkdtemp(prefix="marathon-pg-"))
    cluster = PrivatePostgres(folder).init()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


def retried_activities(history) -> list[str]:
    """Activity types whose final attempt was not the first one."""
    scheduled = {
        event.event_id: event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
    }
    return [
        scheduled[event.activity_task_started_event_attributes.scheduled_event_id]
        for event in history.events
        if event.HasField("activity_task_started_event_attributes")
        and event.activity_task_started_event_attributes.attempt > 1
    ]


async def test_a_database_crash_mid_run_loses_nothing(temporal_client, postgres, tmp_path):
    calm = await undisturbed_best(temporal_client, tmp_path)
    url = postgres.url
    upgrade(url)
    queue, evaluate_queue = unique_queue("pg-crash"), unique_queue("pg-crash-e")
    run_id = f"pg-crash-{uuid.uuid4().hex[:8]}"
    fake = HoldProposal(hold=2)
    try:
        async with loop_workers(temporal_client, fake, task_queue=queue, evaluate_queue=evaluate_queue,
                                recorder=Recorder(url)):
            handle = await temporal_client.start_workflow(
                OptimizeKernelWorkflow.run,
                loop_input(run_id, evaluate_queue, budget=Budget(iterations=ITERATIONS), goal=GOAL,
                           candidates_per_iteration=CANDIDATES),
                id=run_id, task_queue=queue,
            )
            await asyncio.wait_for(fake.held.wait(), timeout=120)
            # The steady loop asks for iteration 2 while iteration 1 is still judged: wait for its
            # records (iteration 2 stays held), then take the database down.
            for _ in range(240):
                if len(stored(url, run_id)) >= CANDIDATES:
                    break
                await asyncio.sleep(0.5)
            assert [(r[0], r[1]) for r in stored(url, run_id)] == expected_keys()[:CANDIDATES]
            await asyncio.to_thread(postgres.crash)
            fake.gate.set()  # iteration 2 goes on and its record meets a dead database
            await asyncio.sleep(DOWN_S)
            await asyncio.to_thread(postgres.start)
            result = await asyncio.wait_for(handle.result(), timeout=180)
            noted = await notebook_keys(handle)
            used = await used_gpu_seconds(handle)
            history = await handle.fetch_history()
        rows = stored(url, run_id)
    finally:
        dispose_engine(url)
    assert (result.iterations, result.stop_reason) == (ITERATIONS, "budget_iterations")
    assert [(r[0], r[1]) for r in rows] == expected_keys()
    assert noted == expected_keys()
    assert best_of(rows) == calm.best
    assert used == calm.gpu_seconds, "an evaluation was lost or counted twice"
    assert any(name.startswith("record") for name in retried_activities(history)), (
        "no store activity was retried: the outage was never met"
    )
