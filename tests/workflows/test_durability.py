"""A run survives its workers going away and the Temporal server restarting: it resumes at the
last completed step, no attempt is recorded twice, and its notebook, best kernel and counted
evaluations are those of an undisturbed run with the same (deterministic) scores."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from temporalio import activity

from activities.record import Recorder
from marathon.temporal_server import DevServer
from store.db import dispose_engine, session_scope, upgrade
from store.repository import list_attempts
from tests.loop_fixtures import FakeLoop, loop_input, loop_workers, unique_queue
from tests.reliability.crash_scoring import score
from workflows.optimize import OptimizeKernelWorkflow
from workflows.types import Budget, Goal, ProposeInput, ProposeResult

ITERATIONS, CANDIDATES = 4, 3


class HoldAt(FakeLoop):
    """Holds the proposer of iteration ``hold`` until ``gate`` opens, and says when it is held."""

    def __init__(self, hold: int) -> None:
        super().__init__(score=score)
        self.hold = hold
        self.held = asyncio.Event()

    @activity.defn(name="propose")
    async def propose(self, input: ProposeInput) -> ProposeResult:
        if input.iteration == self.hold and not self.held.is_set():
            self.held.set()
            self.gate.clear()
        return await FakeLoop.propose(self, input)


def attempts_in(url: str, run_id: str) -> list[tuple[int, int]]:
    with session_scope(url) as session:
        attempts, _ = list_attempts(session, run_id, limit=100)
        return [(a.iteration, a.index) for a in attempts]


def expected() -> list[tuple[int, int]]:
    return [(i, j) for i in range(1, ITERATIONS + 1) for j in range(CANDIDATES)]


async def outcome(handle) -> tuple[list[tuple[int, int]], tuple[int, int], float]:
    """What must not depend on a crash: the notebook's (iteration, index) entries, sorted (a
    duplicate or a gap shows), the best's (iteration, index), and the GPU-seconds counted (the
    fake evaluator reports 1.0 per evaluation, so a lost or doubled evaluation shows)."""
    result = await handle.result()
    notebook = await handle.query(OptimizeKernelWorkflow.notebook)
    status = await handle.query(OptimizeKernelWorkflow.status)
    entries = sorted((e.iteration, e.index) for e in notebook.entries)
    return entries, (result.best.iteration, result.best.index), status.budget_used["gpu_seconds"]


async def undisturbed(client) -> tuple[list[tuple[int, int]], tuple[int, int], float]:
    queue, evaluate_queue = unique_queue(), unique_queue("eval")
    run_id = f"calm-{uuid.uuid4().hex[:8]}"
    async with loop_workers(client, FakeLoop(score=score), task_queue=queue, evaluate_queue=evaluate_queue):
        handle = await client.start_workflow(
            OptimizeKernelWorkflow.run,
            loop_input(run_id, evaluate_queue, budget=Budget(iterations=ITERATIONS), goal=Goal(target=9.0)),
            id=run_id,
            task_queue=queue,
        )
        calm = await outcome(handle)
    assert calm[0] == expected()
    return calm


async def test_a_new_worker_resumes_the_run_of_a_stopped_one(temporal_client, tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    queue, evaluate_queue = unique_queue(), unique_queue("eval")
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    first = HoldAt(hold=3)
    try:
        async with loop_workers(temporal_client, first, task_queue=queue, evaluate_queue=evaluate_queue, recorder=Recorder(url)):
            handle = await temporal_client.start_workflow(
                OptimizeKernelWorkflow.run,
                loop_input(run_id, evaluate_queue, budget=Budget(iterations=ITERATIONS), goal=Goal(target=9.0)),
                id=run_id,
                task_queue=queue,
            )
            await first.held.wait()
            # Leaving the block shuts the workers down with iteration 3's proposal in flight (the
            # steady loop proposes it while iteration 1 or 2 is still being judged).
        recorded = attempts_in(url, run_id)
        # Whole iterations only: an iteration is recorded when it closes, all its attempts at once.
        assert recorded in [expected()[: done * CANDIDATES] for done in range(3)], recorded

        second = FakeLoop(score=score)
        async with loop_workers(temporal_client, second, task_queue=queue, evaluate_queue=evaluate_queue, recorder=Recorder(url)):
            result = await handle.result()
            disturbed = await outcome(handle)
        assert disturbed == await undisturbed(temporal_client)
        assert (result.iterations, result.stop_reason) == (ITERATIONS, "budget_iterations")
        assert attempts_in(url, run_id) == expected()
        # The new worker picked up where the old one stopped: iterations 3 and 4 only.
        assert sorted({p.iteration for p in second.proposals}) in ([3, 4], [4])
    finally:
        dispose_engine(url)


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
async def test_the_run_survives_a_temporal_server_restart(tmp_path, how):
    """The dev server stopped (SIGTERM) or killed (SIGKILL: no chance to flush) while an
    iteration is in flight, then started again on the same SQLite file."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    db = tmp_path / "temporal.db"
    server = DevServer(db_path=db, log_path=tmp_path / "temporal.log").start()
    queue, evaluate_queue = unique_queue(), unique_queue("eval")
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    fake = HoldAt(hold=3)
    try:
        client = await server.connect()
        async with loop_workers(client, fake, task_queue=queue, evaluate_queue=evaluate_queue, recorder=Recorder(url)):
            handle = await client.start_workflow(
                OptimizeKernelWorkflow.run,
                loop_input(run_id, evaluate_queue, budget=Budget(iterations=ITERATIONS), goal=Goal(target=9.0)),
                id=run_id,
                task_queue=queue,
            )
            await fake.held.wait()
            if how == "sigkill":
                server.process.kill()
                server.process.wait()
            else:
                server.stop()
            server = DevServer(db_path=db, port=server.port, log_path=tmp_path / "temporal.log").start()
            await server.connect()
            fake.gate.set()
            result = await asyncio.wait_for(handle.result(), timeout=120)
            disturbed = await outcome(handle)
        assert (result.iterations, result.stop_reason) == (ITERATIONS, "budget_iterations")
        assert attempts_in(url, run_id) == expected()
        assert disturbed == await undisturbed(client)
    finally:
        server.stop()
        dispose_engine(url)

