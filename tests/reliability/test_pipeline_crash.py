"""Chaos in the steady loop: the evaluation worker is SIGKILLed while several evaluations are in
flight on it (a worker process of its own taking three at once, every evaluation of iteration 2
held), then a new one starts on the same queue.

The run completes its budget; every (iteration, index) is in the store and in the notebook
exactly once; every evaluation the kill interrupted was done again; and the GPU-seconds the
workflow counted are those of the attempts it recorded (the fake reports 1.0 per evaluation, so
an evaluation lost or counted twice shows). What the fault cost is printed: the wall time from
the kill to the killed evaluations' new start (Temporal's 20 s heartbeat timeout; the other
evaluations of the window go on meanwhile). ``slow``: that timeout is the test's own floor.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from datetime import timedelta

import pytest

from activities.record import Recorder
from marathon.workers import build_gpu_worker
from store.db import dispose_engine, session_scope, upgrade
from store.repository import list_attempts
from tests.loop_fixtures import FakeLoop, loop_input, loop_settings, loop_workers, unique_queue
from tests.reliability.crash_scoring import score
from tests.reliability.test_crashes import REPO, kill, notebook_keys, used_gpu_seconds, wait_for_file
from workflows.optimize import OptimizeKernelWorkflow
from workflows.types import Budget, Goal

ITERATIONS, CANDIDATES, IN_FLIGHT = 4, 3, 3
HELD = 2  # evaluations of iteration 2 in flight on the worker when it is killed


def recorded(url: str, run_id: str) -> list[tuple[int, int, float]]:
    with session_scope(url) as session:
        attempts, _ = list_attempts(session, run_id, limit=1000)
        return sorted((a.iteration, a.index, a.gpu_seconds) for a in attempts)


@pytest.mark.slow
async def test_killing_the_evaluation_worker_with_several_in_flight_loses_nothing(
    temporal_client, temporal_server, tmp_path
):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    queue, evaluate_queue = unique_queue("chaos"), unique_queue("chaos-e")
    run_id = f"chaos-{uuid.uuid4().hex[:8]}"
    held = tmp_path / "held"
    victim = start_worker_holding_several(temporal_server.address, evaluate_queue, held)
    cpu_side = FakeLoop(score=score)
    try:
        async with loop_workers(temporal_client, cpu_side, task_queue=queue, evaluate_queue=None,
                                recorder=Recorder(url)):
            handle = await temporal_client.start_workflow(
                OptimizeKernelWorkflow.run,
                loop_input(run_id, evaluate_queue, budget=Budget(iterations=ITERATIONS), goal=Goal(target=50.0),
                           candidates_per_iteration=CANDIDATES, evaluations_in_flight=IN_FLIGHT),
                id=run_id, task_queue=queue,
            )
            await wait_for_file(held, victim)
            kill(victim)
            killed_at = time.monotonic()
            replacement = FakeLoop(score=score)
            worker = build_gpu_worker(
                temporal_client, loop_settings(), task_queue=evaluate_queue, activities=[replacement.evaluate],
                graceful_shutdown_timeout=timedelta(seconds=1), max_heartbeat_throttle_interval=timedelta(seconds=1),
                max_concurrent_activities=IN_FLIGHT,
            )
            async with worker:
                while not any(e.iteration == 2 and not e.confirm for e in replacement.evaluations):
                    await asyncio.sleep(0.1)
                lost_s = time.monotonic() - killed_at
                result = await asyncio.wait_for(handle.result(), timeout=300)
            noted = await notebook_keys(handle)
            used = await used_gpu_seconds(handle)
        rows = recorded(url, run_id)
    finally:
        if victim.poll() is None:
            kill(victim)
        dispose_engine(url)
    print(f"\nthe killed evaluations started again {lost_s:.1f} s after the kill (the heartbeat timeout)")
    expected = [(i, j) for i in range(1, ITERATIONS + 1) for j in range(CANDIDATES)]
    assert (result.iterations, result.stop_reason) == (ITERATIONS, "budget_iterations")
    assert [(i, j) for i, j, _ in rows] == expected
    assert noted == expected
    redone = {e.index for e in replacement.evaluations if e.iteration == 2 and not e.confirm}
    assert len(redone) >= HELD, f"the evaluations killed in flight were not all done again: {redone}"
    assert used == pytest.approx(sum(seconds for _, _, seconds in rows)), "an evaluation was lost or counted twice"


def start_worker_holding_several(address: str, queue: str, held):
    """The evaluation worker that takes ``IN_FLIGHT`` at once and holds all of iteration 2."""
    argv = [sys.executable, "-m", "tests.reliability.crash_worker", "eval", "--address", address, "--queue", queue,
            "--held", str(held), "--hold-iteration", "2", "--hold-all", str(HELD),
            "--concurrency", str(IN_FLIGHT)]
    return subprocess.Popen(argv, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
