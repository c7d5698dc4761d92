"""The stack a fuzzer runs against: the real API (uvicorn in a thread) on a real SQLite store,
the real Temporal dev server, and the API tests' stand-in workflow served on the run's queue with
a CPU-mode evaluation queue polled, so runs start, answer queries and take steering."""

from __future__ import annotations

import asyncio
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from marathon.settings import Settings
from store import repository
from store.db import dispose_engine, session_scope
from tests.api.standin_workflow import StandInOptimizeWorkflow
from tests.reliability.threaded_api import ThreadedApi


@activity.defn(name="standin_evaluate")
async def standin_evaluate() -> None:
    """Never called: it makes the evaluation queue polled, so runs start without a gpu_arch."""


async def _connect(address: str, wait_s: float = 90.0) -> Client:
    """A client once the dev server's frontend is healthy (on a loaded machine it takes a while)."""
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        try:
            return await Client.connect(address)
        except RuntimeError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(1.0)


class StandInWorkers:
    """The stand-in workflow and evaluator polling in a thread of their own (the fuzzer is synchronous)."""

    def __init__(self, address: str, task_queue: str, evaluate_queue: str) -> None:
        self.address, self.task_queue, self.evaluate_queue = address, task_queue, evaluate_queue
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._serve(),), daemon=True)
        self.stop: asyncio.Event | None = None
        self.error: BaseException | None = None

    async def _serve(self) -> None:
        try:
            self.stop = asyncio.Event()
            client = await _connect(self.address)
            workflows = Worker(client, task_queue=self.task_queue, workflows=[StandInOptimizeWorkflow],
                               workflow_runner=UnsandboxedWorkflowRunner())
            evaluator = Worker(client, task_queue=self.evaluate_queue, activities=[standin_evaluate])
            async with workflows, evaluator:
                self.ready.set()
                await self.stop.wait()
        except BaseException as error:  # reported to the test by __enter__
            self.error = error
            self.ready.set()

    def __enter__(self) -> "StandInWorkers":
        self.thread.start()
        if not self.ready.wait(150) or self.error is not None:
            raise RuntimeError(f"the stand-in workers did not start: {self.error!r}")
        return self

    def __exit__(self, *exc) -> None:
        if self.stop is not None:
            self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(timeout=30)


@contextmanager
def fuzz_stack(temporal_address: str, home: Path) -> Iterator[tuple[ThreadedApi, str, str]]:
    """Yields (the running API, a valid token, the store's URL)."""
    url = f"sqlite:///{home / 'fuzz.db'}"
    queue = f"fuzz-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        _env_file=None, home=home / "home", MARATHON_DATABASE_URL=url, temporal_address=temporal_address,
        cpu_task_queue=queue, gpu_task_queue_prefix=f"{queue}-eval-", worker_wait_s=0.5,
        reconcile_every_s=0,
    )
    try:
        with StandInWorkers(temporal_address, queue, f"{queue}-eval-cpu"), ThreadedApi(settings) as api:
            with session_scope(url) as session:
                token = repository.create_token(session, name="fuzz")
            yield api, token, url
    finally:
        dispose_engine(url)
