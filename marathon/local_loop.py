"""The optimization loop in one process: the CPU worker (the real workflow, with the real
activities or same-name stand-ins) and an evaluation worker, on a Temporal the caller has
connected to, for the duration of an ``async with``; then runs started on them.

Shared by ``marathon soak``, the GPU scripts (``scripts/gpu/loop_on_gpu.py``) and the tests,
so how the loop is put together in-process is written once. A deployment runs the same
workers as processes instead (``marathon worker cpu|gpu``, ``marathon up``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, AsyncIterator, Callable, Optional, Sequence

from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from marathon.settings import Settings
from marathon.workers import build_cpu_worker, build_gpu_worker, default_device, gpu_task_queue
from workflows.optimize import OptimizeKernelWorkflow
from workflows.types import OptimizeInput, OptimizeResult


@dataclass(frozen=True)
class LocalLoop:
    """The running workers, the queues they poll, and how to start a run on them."""

    client: Client
    task_queue: str
    # Where the run's evaluations go: this loop's evaluation worker polls it, or (without one)
    # a worker elsewhere does; None when the caller did not say.
    evaluate_queue: Optional[str]
    cpu_worker: Worker
    evaluation_worker: Optional[Worker]

    async def start(self, input: OptimizeInput, **options: Any) -> WorkflowHandle[Any, OptimizeResult]:
        """Start the optimize workflow for ``input`` (workflow id: its run id) on this loop's
        CPU worker. ``options`` go to ``Client.start_workflow``."""
        # A run whose evaluations go to a queue no worker polls would wait (then pause) for nothing.
        if self.evaluation_worker is not None and input.evaluate_task_queue != self.evaluate_queue:
            queue = input.evaluate_task_queue
            sent_to = repr(queue) if queue else f"the default queue of gpu_arch {input.gpu_arch!r}"
            raise ValueError(
                f"run {input.run_id} sends its evaluations to {sent_to}, but this loop's evaluation worker "
                f"polls {self.evaluate_queue!r}: set evaluate_task_queue=loop.evaluate_queue"
            )
        return await self.client.start_workflow(
            OptimizeKernelWorkflow.run, input, id=input.run_id, task_queue=self.task_queue, **options
        )

    async def execute(self, input: OptimizeInput, **options: Any) -> OptimizeResult:
        """Start the run and wait for its result (raises ``WorkflowFailureError`` if it fails)."""
        handle = await self.start(input, **options)
        return await handle.result()


@contextlib.asynccontextmanager
async def local_loop(
    client: Client,
    settings: Settings,
    *,
    task_queue: Optional[str] = None,
    evaluate_queue: Optional[str] = None,
    evaluator: bool = True,
    device: Optional[str] = None,
    database_url: Optional[str] = None,
    cpu_activities: Optional[Sequence[Callable[..., Any]]] = None,
    evaluate_activities: Optional[Sequence[Callable[..., Any]]] = None,
    graceful_shutdown: Optional[timedelta] = None,
    max_heartbeat_throttle: Optional[timedelta] = None,
) -> AsyncIterator[LocalLoop]:
    """Run the loop's workers in this process for the duration of the block.

    - ``task_queue``: the CPU worker's queue (default: the settings' CPU queue).
    - ``evaluator``: whether to run an evaluation worker here; without one, runs wait for a
      worker elsewhere on ``evaluate_queue``. Its queue is ``evaluate_queue``, by default the
      one of ``device``'s architecture (``marathon-gpu-sm90``, ``marathon-gpu-cpu``).
    - ``cpu_activities`` / ``evaluate_activities`` replace the real activities (same-name
      stand-ins, e.g. ``marathon.loop_fakes.FakeLoop``); the real ones use ``database_url``
      (default: the settings' store) and ``device`` (default: CUDA when torch sees a GPU).
    - ``graceful_shutdown``: how long leaving the block waits for activities in flight
      (default: the workers' own, minutes for an evaluation); ``max_heartbeat_throttle``: how
      soon a cancellation reaches an evaluation (default: Temporal's, 0.8 x its heartbeat
      timeout). Tests that stop workers or cancel on purpose shorten both.
    """
    if not evaluator and evaluate_activities is not None:
        raise ValueError("evaluate_activities were given with evaluator=False: no worker would run them")
    if evaluator and evaluate_queue is None:
        device = device or default_device()
        evaluate_queue = gpu_task_queue(settings, device)
    shutdown = {} if graceful_shutdown is None else {"graceful_shutdown_timeout": graceful_shutdown}
    throttle = {} if max_heartbeat_throttle is None else {"max_heartbeat_throttle_interval": max_heartbeat_throttle}
    cpu = build_cpu_worker(
        client,
        settings,
        task_queue=task_queue or settings.cpu_task_queue,
        database_url=database_url,
        activities=cpu_activities,
        **shutdown,
    )
    evaluation = None
    if evaluator:
        evaluation = build_gpu_worker(
            client,
            settings,
            device,
            task_queue=evaluate_queue,
            database_url=database_url,
            activities=evaluate_activities,
            **shutdown,
            **throttle,
        )
    async with contextlib.AsyncExitStack() as stack:
        for worker in (cpu, evaluation):
            if worker is not None:
                await stack.enter_async_context(worker)
        yield LocalLoop(client, cpu.task_queue, evaluate_queue, cpu, evaluation)
