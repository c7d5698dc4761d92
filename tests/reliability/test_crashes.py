"""Crashes mid-run that tests/workflows/test_durability.py (graceful worker stop, Temporal
restart) and tests/cli/test_up_resume.py (Ctrl-C of ``marathon up``) do not cover:

- the evaluation worker is SIGKILLed during an evaluation (a worker process of its own);
- the CPU worker is SIGKILLed during a proposal (a worker process of its own);
- the API is stopped mid-run (in a thread, gracefully) or SIGKILLed (its own uvicorn process),
  and a new one started on the same store.

In each the run completes, each (iteration, index) is in the store and in the workflow's
notebook exactly once, the killed step was done again rather than lost, and the best kernel is
the one of an undisturbed run with the same inputs. The evaluator is the deterministic ``crash_scoring.score`` (a real judge's
interpreter timings differ from run to run, so "the same best" would not be a fair test).

The kills cost the workflow's heartbeat timeouts (20 s for an evaluation and for a proposal)
before Temporal hands the step to another worker: those two tests are ``slow``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from activities.record import Recorder
from marathon.settings import Settings
from marathon.workers import build_gpu_worker
from store import repository
from store.db import dispose_engine, session_scope, upgrade
from store.repository import list_attempts
from tests.loop_fixtures import FakeLoop, loop_input, loop_settings, loop_workers, unique_queue
from tests.reliability.crash_scoring import score
from tests.reliability.process_api import ProcessApi
from tests.reliability.threaded_api import ThreadedApi
from workflows.optimize import OptimizeKernelWorkflow
from workflows.types import Budget, Goal, ProposeInput, ProposeResult

from temporalio import activity

REPO = Path(__file__).resolve().parents[2]
ITERATIONS, CANDIDATES = 4, 2
GOAL = Goal(target=50.0)


def expected_keys() -> list[tuple[int, int]]:
    return [(i, j) for i in range(1, ITERATIONS + 1) for j in range(CANDIDATES)]


async def notebook_keys(handle) -> list[tuple[int, int]]:
    """(iteration, index) of every notebook entry, sorted: a duplicate or a gap shows."""
    notebook = await handle.query(OptimizeKernelWorkflow.notebook)
    assert notebook.compactions == 0, "this short run must keep every entry in full"
    return sorted((entry.iteration, entry.index) for entry in notebook.entries)


def stored(url: str, run_id: str) -> list[tuple[int, int, str, float | None, bool]]:
    with session_scope(url) as session:
        attempts, _ = list_attempts(session, run_id, limit=1000)
        return sorted((a.iteration, a.index, a.status, a.speedup, a.is_best) for a in attempts)


def best_of(rows) -> tuple[int, int, float | None]:
    best = [(r[0], r[1], r[3]) for r in rows if r[4]]
    assert len(best) == 1, rows
    return best[0]


async def used_gpu_seconds(handle) -> float:
    """The run's GPU-seconds as the workflow counted them: the fake evaluator reports 1.0 per
    evaluation, so a lost or double-counted evaluation changes this number."""
    return (await handle.query(OptimizeKernelWorkflow.status)).budget_used["gpu_seconds"]


@dataclass
class Calm:
    best: tuple[int, int, float | None]
    gpu_seconds: float


async def undisturbed_best(client, tmp_path: Path) -> Calm:
    """The same run with nothing killed: its best and the evaluations it counted."""
    url = f"sqlite:///{tmp_path / 'undisturbed.db'}"
    upgrade(url)
    queue, evaluate_queue = unique_queue("calm"), unique_queue("calm-eval")
    run_id = f"calm-{uuid.uuid4().hex[:8]}"
    try:
        async with loop_workers(client, FakeLoop(score=score), task_queue=queue, evaluate_queue=evaluate_queue, recorder=Recorder(url)):
            handle = await client.start_workflow(
                OptimizeKernelWorkflow.run,
                loop_input(run_id, evaluate_queue, budget=Budget(iterations=ITERATIONS), goal=GOAL, candidates_per_iteration=CANDIDATES),
                id=run_id, task_queue=queue,
            )
            await handle.result()
            gpu_seconds = await used_gpu_seconds(handle)
        rows = stored(url, run_id)
    finally:
        dispose_engine(url)
    assert [(r[0], r[1]) for r in rows] == expected_keys()
    assert gpu_seconds >= len(expected_keys())  # every evaluation, plus the confirmations
    return Calm(best=best_of(rows), gpu_seconds=gpu_seconds)


def start_worker(role: str, address: str, queue: str, held: Path, hold_iteration: int, database: str | None = None):
    argv = [sys.executable, "-m", "tests.reliability.crash_worker", role, "--address", address, "--queue", queue,
            "--held", str(held), "--hold-iteration", str(hold_iteration)]
    if database:
        argv += ["--database", database]
    return subprocess.Popen(argv, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


async def wait_for_file(path: Path, process: subprocess.Popen, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert process.poll() is None, f"the worker exited early with {process.returncode}"
        assert time.monotonic() < deadline, f"{path} never appeared"
        await asyncio.sleep(0.2)


def kill(process: subprocess.Popen) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL


@pytest.mark.slow
async def test_killing_the_evaluation_worker_mid_evaluation_loses_nothing(temporal_client, temporal_server, tmp_path):
    calm = await undisturbed_best(temporal_client, tmp_path)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    queue, evaluate_queue = unique_queue("kill-eval"), unique_queue("kill-eval-e")
    run_id = f"kill-eval-{uuid.uuid4().hex[:8]}"
    held = tmp_path / "held"
    victim = start_worker("eval", temporal_server.address, evaluate_queue, held, hold_iteration=2)
    cpu_side = FakeLoop(score=score)
    try:
        async with loop_workers(temporal_client, cpu_side, task_queue=queue, evaluate_queue=None, recorder=Recorder(url)):
            handle = await temporal_client.start_workflow(
                OptimizeKernelWorkflow.run,
                loop_input(run_id, evaluate_queue, budget=Budget(iterations=ITERATIONS), goal=GOAL, candidates_per_iteration=CANDIDATES),
                id=run_id, task_queue=queue,
            )
            await wait_for_file(held, victim)
            kill(victim)
            replacement = FakeLoop(score=score)
            worker = build_gpu_worker(
                temporal_client, loop_settings(), task_queue=evaluate_queue, activities=[replacement.evaluate],
                graceful_shutdown_timeout=timedelta(seconds=1), max_heartbeat_throttle_interval=timedelta(seconds=1),
            )
            async with worker:
                result = await asyncio.wait_for(handle.result(), timeout=300)
            noted = await notebook_keys(handle)
            used = await used_gpu_seconds(handle)
        rows = stored(url, run_id)
    finally:
        if victim.poll() is None:
            kill(victim)
        dispose_engine(url)
    assert (result.iterations, result.stop_reason) == (ITERATIONS, "budget_iterations")
    assert [(r[0], r[1]) for r in rows] == expected_keys()
    assert noted == expected_keys()
    assert any(e.iteration == 2 for e in replacement.evaluations), "the killed evaluation was not done again"
    assert best_of(rows) == calm.best
    assert used == calm.gpu_seconds, "an evaluation was lost or counted twice"


class HoldProposal(FakeLoop):
    def __init__(self, hold: int) -> None:
        super().__init__(score=score)
        self.hold, self.held = hold, asyncio.Event()

    @activity.defn(name="propose")
    async def propose(self, input: ProposeInput) -> ProposeResult:
        if input.iteration == self.hold and not self.held.is_set():
            self.held.set()
            self.gate.clear()
        return await FakeLoop.propose(self, input)


@pytest.mark.slow
async def test_killing_the_cpu_worker_mid_proposal_loses_nothing(temporal_client, temporal_server, tmp_path):
    calm = await undisturbed_best(temporal_client, tmp_path)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    queue, evaluate_queue = unique_queue("kill-cpu"), unique_queue("kill-cpu-e")
    run_id = f"kill-cpu-{uuid.uuid4().hex[:8]}"
    held = tmp_path / "held"
    victim = start_worker("cpu", temporal_server.address, queue, held, hold_iteration=3, database=url)
    evaluator = FakeLoop(score=score)
    gpu = build_gpu_worker(
        temporal_client, loop_settings(), task_queue=evaluate_queue, activities=[evaluator.evaluate],
        graceful_shutdown_timeout=timedelta(seconds=1),
    )
    try:
        async with gpu:
            handle = await temporal_client.start_workflow(
                OptimizeKernelWorkflow.run,
                loop_input(run_id, evaluate_queue, budget=Budget(iterations=ITERATIONS), goal=GOAL, candidates_per_iteration=CANDIDATES),
                id=run_id, task_queue=queue,
            )
            await wait_for_file(held, victim)
            kill(victim)
            # The steady loop proposes iteration 3 while iterations 1 and 2 may still be judged:
            # what is stored by then is whole iterations among those two, each once.
            before = [(r[0], r[1]) for r in stored(url, run_id)]
            assert before == expected_keys()[: len(before)] and len(before) % CANDIDATES == 0
            assert len(before) <= 2 * CANDIDATES
            replacement = FakeLoop(score=score)
            async with loop_workers(temporal_client, replacement, task_queue=queue, evaluate_queue=None, recorder=Recorder(url)):
                result = await asyncio.wait_for(handle.result(), timeout=400)
                noted = await notebook_keys(handle)
                used = await used_gpu_seconds(handle)
        rows = stored(url, run_id)
    finally:
        if victim.poll() is None:
            kill(victim)
        dispose_engine(url)
    assert (result.iterations, result.stop_reason) == (ITERATIONS, "budget_iterations")
    assert [(r[0], r[1]) for r in rows] == expected_keys()
    assert noted == expected_keys()
    assert 3 in {p.iteration for p in replacement.proposals}, "the killed proposal was not made again"
    assert best_of(rows) == calm.best
    assert used == calm.gpu_seconds, "an evaluation was lost or counted twice"


class ApiUnderTest:
    """The API either in a thread of this process (stopped gracefully) or as a process of its own
    (SIGKILLed: no shutdown handler runs), started the same way."""

    def __init__(self, how: str, settings: Settings, tmp_path: Path) -> None:
        self.how = how
        if how == "sigkill":
            env = {
                "MARATHON_HOME": str(settings.home), "MARATHON_DATABASE_URL": settings.resolved_database_url,
                "MARATHON_TEMPORAL_ADDRESS": settings.temporal_address,
                "MARATHON_CPU_TASK_QUEUE": settings.cpu_task_queue,
                "MARATHON_GPU_TASK_QUEUE_PREFIX": settings.gpu_task_queue_prefix,
            }
            self.api = ProcessApi(env, tmp_path / "api.log")
        else:
            self.api = ThreadedApi(settings)

    @property
    def base_url(self) -> str:
        return self.api.base_url

    async def start(self) -> "ApiUnderTest":
        await asyncio.to_thread(self.api.start if self.how == "sigkill" else self.api.__enter__)
        return self

    async def end(self) -> None:
        """Kill it (SIGKILL) or stop it (graceful), whichever this test is about."""
        if self.how == "sigkill":
            await asyncio.to_thread(self.api.kill)
            assert self.api.process.returncode == -signal.SIGKILL
        elif self.api.thread.is_alive():
            await asyncio.to_thread(self.api.__exit__, None, None, None)
            assert not self.api.thread.is_alive()

    async def close(self) -> None:
        """Clean-up: whatever still runs is stopped."""
        if self.how == "sigkill":
            await asyncio.to_thread(self.api.stop)
        elif self.api.thread.is_alive():
            await asyncio.to_thread(self.api.__exit__, None, None, None)


@pytest.mark.parametrize("how", ["stopped", "sigkill"])
async def test_restarting_the_api_mid_run_loses_nothing(temporal_client, temporal_server, tmp_path, how):
    calm = await undisturbed_best(temporal_client, tmp_path)
    url = f"sqlite:///{tmp_path / 'api.db'}"
    queue = unique_queue("api-restart")
    settings = Settings(
        _env_file=None, home=tmp_path / "home", MARATHON_DATABASE_URL=url, temporal_address=temporal_server.address,
        cpu_task_queue=queue, gpu_task_queue_prefix=f"{queue}-eval-",
    )
    fake = HoldProposal(hold=2)
    first = await ApiUnderTest(how, settings, tmp_path).start()
    second = None
    try:
        with session_scope(url) as session:
            token = repository.create_token(session, name="restart")
        headers = {"Authorization": f"Bearer {token}"}
        async with loop_workers(temporal_client, fake, task_queue=queue, evaluate_queue=f"{queue}-eval-sm90", recorder=Recorder(url)):
            async with httpx.AsyncClient(base_url=first.base_url, headers=headers, timeout=30) as http:
                created = await http.post("/runs", json={
                    "problem": "kda", "goal": {"target": GOAL.target}, "budget": {"iterations": ITERATIONS},
                    "candidates_per_iteration": CANDIDATES, "gpu_arch": "sm90",
                })
            assert created.status_code == 201, created.text
            run_id = created.json()["id"]
            await asyncio.wait_for(fake.held.wait(), timeout=120)
            await first.end()
            second = await ApiUnderTest(how, settings, tmp_path).start()
            fake.gate.set()
            async with httpx.AsyncClient(base_url=second.base_url, headers=headers, timeout=30) as http:
                deadline = time.monotonic() + 180
                while (run := (await http.get(f"/runs/{run_id}")).json())["status"] == "running":
                    assert time.monotonic() < deadline, run
                    await asyncio.sleep(0.5)
                attempts = (await http.get(f"/runs/{run_id}/attempts", params={"limit": 1000})).json()["data"]
            noted = await notebook_keys(temporal_client.get_workflow_handle(run_id))
            used = await used_gpu_seconds(temporal_client.get_workflow_handle(run_id))
        rows = stored(url, run_id)
    finally:
        for api in (first, second):
            if api is not None:
                await api.close()
        dispose_engine(url)
    assert run["status"] == "completed" and run["iteration"] == ITERATIONS, run
    assert sorted((a["iteration"], a["index"]) for a in attempts) == expected_keys()
    assert [(r[0], r[1]) for r in rows] == expected_keys()
    assert noted == expected_keys()
    assert best_of(rows) == calm.best
    assert used == calm.gpu_seconds, "an evaluation was lost or counted twice"
    best = next(a for a in attempts if a["id"] == run["best_attempt_id"])
    assert (best["iteration"], best["index"]) == calm.best[:2]
