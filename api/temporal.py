"""The API's side of Temporal: one lazily connected client and the few calls the routes make.

The API starts even when Temporal is down (the store-backed routes still answer); routes that
need Temporal get ``TemporalUnavailable`` and turn it into a 503 that names the address.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable, Optional

from temporalio.api.enums.v1 import PendingActivityState, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    RPCError,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import TypedSearchAttributes
from temporalio.service import RPCStatusCode

from marathon.settings import LLM_CAPABILITY, Settings, temporal_tls
from workflows.types import OptimizeInput, OptimizeResult, RunStatus

WORKFLOW_NAME = "OptimizeKernelWorkflow"
QUERY_TIMEOUT = timedelta(seconds=3)
RPC_TIMEOUT = timedelta(seconds=10)
UPDATE_TIMEOUT = timedelta(seconds=5)

# Evaluation queues are named after the hardware (``marathon-gpu-sm90``, ``marathon-gpu-cpu`` in
# CPU mode); a run started without an explicit architecture goes where an evaluator is polling,
# GPUs first, newest first. With none polling it is refused (after a short wait), never pinned
# to a guess: a run on a queue nobody serves would sit until its evaluation wait runs out.
KNOWN_ARCHS = ("sm120", "sm100", "sm90", "sm89", "sm86", "sm80", "cpu")

EVALUATE_QUEUE_MEMO = "evaluate_task_queue"

ClientFactory = Callable[[], Awaitable[Client]]

_CLOSED_AS_FAILED = {
    WorkflowExecutionStatus.FAILED: "the workflow failed",
    WorkflowExecutionStatus.CANCELED: "the workflow was cancelled",
    WorkflowExecutionStatus.TERMINATED: "the workflow was terminated",
    WorkflowExecutionStatus.TIMED_OUT: "the workflow timed out",
}


class TemporalUnavailable(Exception):
    """Temporal could not be reached or refused the call; the message says which and why."""


@dataclass
class PendingEvaluation:
    """An "evaluate" activity Temporal holds for the run: scheduled (no worker took it yet) or started."""

    order: int
    started: bool
    attempt: int
    waiting_s: float
    task_queue: str = ""


@dataclass
class LiveState:
    """What Temporal says about a run right now. ``status`` is None when Temporal was not reachable."""

    status: Optional[str] = None
    stop_reason: Optional[str] = None
    run_status: Optional[RunStatus] = None
    found: bool = True
    evaluations: list[PendingEvaluation] = field(default_factory=list)
    # Whether a worker polls the queue of an evaluation nobody started; None when none waits.
    evaluation_polled: Optional[bool] = None
    evaluation_workers: int = 0  # how many poll it, when one waits
    # What a live run waits for that nobody provides (no worker polls its queue), in words; "" if nothing.
    waiting_for: str = ""
    # The propose step's last failure while Temporal retries it ("" when it is not failing).
    proposer_failing: str = ""


def propose_retrying(description) -> str:
    """``proposer failing: <last error> (attempt 3, retrying)`` while the run's "propose" activity
    is being retried after a failure; "" otherwise."""
    for info in description.raw_description.pending_activities:
        if info.activity_type.name != "propose" or info.attempt <= 1 or not info.HasField("last_failure"):
            continue
        reason = info.last_failure.message or "failed"
        return f"proposer failing: {reason[:300]} (attempt {info.attempt}, retrying)"
    return ""


def pending_evaluations(description, now: datetime) -> list[PendingEvaluation]:
    """The run's pending "evaluate" activities in the order the workflow scheduled them."""
    out = []
    for info in description.raw_description.pending_activities:
        if info.activity_type.name != "evaluate":
            continue
        started = info.state in (
            PendingActivityState.PENDING_ACTIVITY_STATE_STARTED,
            PendingActivityState.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED,
        )
        since = info.scheduled_time.ToDatetime(timezone.utc) if info.HasField("scheduled_time") else now
        order = int(info.activity_id) if info.activity_id.isdigit() else len(out)
        queue = info.activity_options.task_queue.name if info.HasField("activity_options") else ""
        out.append(PendingEvaluation(order, started, info.attempt, max(0.0, (now - since).total_seconds()), queue))
    return sorted(out, key=lambda item: item.order)


class TemporalGateway:
    def __init__(self, settings: Settings, factory: Optional[ClientFactory] = None):
        self.settings = settings
        self._factory = factory or self._connect
        self._client: Optional[Client] = None
        self._lock = asyncio.Lock()

    async def _connect(self) -> Client:
        return await Client.connect(
            self.settings.temporal_address, namespace=self.settings.temporal_namespace, tls=temporal_tls(self.settings)
        )

    async def client(self) -> Client:
        if self._client is not None:
            return self._client
        async with self._lock:
            if self._client is None:
                try:
                    self._client = await asyncio.wait_for(self._factory(), timeout=10)
                except Exception as error:
                    reason = str(error) or type(error).__name__
                    raise TemporalUnavailable(
                        f"Temporal at {self.settings.temporal_address} is not reachable: {reason}"
                    ) from error
        return self._client

    def ui_url(self, run_id: str) -> str:
        base = self.settings.temporal_ui_url.rstrip("/")
        return f"{base}/namespaces/{self.settings.temporal_namespace}/workflows/{run_id}"

    async def start(self, run: OptimizeInput, search_attributes: Optional[TypedSearchAttributes]) -> None:
        if not run.evaluate_task_queue:
            # The caller owns the queue's name (the settings' prefix and the architecture).
            raise ValueError(f"run {run.run_id} names no evaluate_task_queue; the workflow would refuse it")
        client = await self.client()
        try:
            await client.start_workflow(
                WORKFLOW_NAME,
                run,
                id=run.run_id,
                task_queue=self.settings.cpu_task_queue,
                search_attributes=search_attributes,
                # Where its evaluations go, so a read can say when nobody polls there.
                memo={EVALUATE_QUEUE_MEMO: run.evaluate_task_queue},
                static_summary=f"{run.problem}: {run.goal.describe()}",
                rpc_timeout=RPC_TIMEOUT,
            )
        except RPCError as error:
            raise TemporalUnavailable(f"Temporal refused to start the workflow: {error.message}") from error

    async def _has_poller(self, client: Client, queue: str, kind: TaskQueueType.ValueType) -> bool:
        return bool(await self._pollers(client, queue, kind))

    async def _pollers(self, client: Client, queue: str, kind: TaskQueueType.ValueType) -> list[str]:
        """The identities of the workers polling ``queue`` lately (empty when unknown)."""
        request = DescribeTaskQueueRequest(
            namespace=self.settings.temporal_namespace, task_queue=TaskQueue(name=queue), task_queue_type=kind
        )
        try:
            response = await client.workflow_service.describe_task_queue(request, timeout=QUERY_TIMEOUT)
        except RPCError:
            return []
        return [poller.identity for poller in response.pollers]

    async def polled_archs(self) -> list[str]:
        """The architectures in KNOWN_ARCHS whose evaluation queue has a worker polling, in order."""
        client = await self.client()
        kind = TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
        polled = await asyncio.gather(
            *(self._has_poller(client, self.settings.evaluate_queue(arch), kind) for arch in KNOWN_ARCHS)
        )
        return [arch for arch, busy in zip(KNOWN_ARCHS, polled) if busy]

    async def evaluation_arch(self, wait_s: float = 0.0) -> Optional[str]:
        """The first architecture in KNOWN_ARCHS whose evaluation queue has a worker polling,
        waiting up to ``wait_s`` for one to appear (a stack that has just started); None when
        none polls by then. A run is never pinned to a guessed architecture."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            archs = await self.polled_archs()
            if archs:
                return archs[0]
            if loop.time() >= deadline:
                return None
            await asyncio.sleep(min(0.5, max(0.0, deadline - loop.time())))

    async def cpu_identities(self, wait_s: float = 0.0) -> list[str]:
        """The identities of the CPU workers polling the CPU queue's activities, waiting up to
        ``wait_s`` for a first one to poll."""
        client = await self.client()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            identities = await self._pollers(
                client, self.settings.cpu_task_queue, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
            )
            if identities or loop.time() >= deadline:
                return identities
            await asyncio.sleep(min(0.5, max(0.0, deadline - loop.time())))

    async def cpu_workers(self, wait_s: float = 0.0) -> tuple[int, int]:
        """(CPU workers polling the CPU queue's activities, how many of them offer the LLM
        proposer), waiting up to ``wait_s`` for a first one to poll."""
        identities = await self.cpu_identities(wait_s)
        return len(identities), sum(1 for identity in identities if LLM_CAPABILITY in identity.split())

    async def terminate_quietly(self, run_id: str, reason: str) -> None:
        """Best effort, for a start whose outcome is unknown (it may have reached the server)."""
        try:
            client = await self.client()
            await client.get_workflow_handle(run_id).terminate(reason=reason, rpc_timeout=RPC_TIMEOUT)
        except Exception:
            pass

    async def live_state(self, run_id: str) -> LiveState:
        """Ask Temporal how the run is doing: the status query while it runs, the outcome once closed."""
        try:
            client = await self.client()
            handle = client.get_workflow_handle(run_id, result_type=OptimizeResult)
            description = await handle.describe(rpc_timeout=RPC_TIMEOUT)
        except TemporalUnavailable:
            return LiveState(status=None)
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return LiveState(status=None, found=False)
            return LiveState(status=None)
        if description.status == WorkflowExecutionStatus.RUNNING:
            # A query waits for a worker; with none polling it could only time out.
            polled = await self._has_poller(client, description.task_queue, TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW)
            run_status = await self._query_status(handle) if polled else None
            evaluations = pending_evaluations(description, datetime.now(timezone.utc))
            unstarted = [e for e in evaluations if not e.started]
            queue = (run_status.evaluate_queue if run_status else "") or (unstarted[0].task_queue if unstarted else "")
            evaluation_polled, evaluation_workers = None, 0
            if unstarted and queue:
                evaluation_workers = len(await self._pollers(client, queue, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY))
                evaluation_polled = evaluation_workers > 0
            waiting = [] if polled else [
                f"no CPU worker polls task queue {description.task_queue}: start one (`marathon up`, or "
                "`marathon worker cpu`)"
            ]
            waiting += await self._evaluators_missing(client, description)
            # Without an answer the run is live but running-or-paused is unknown: keep the store's word.
            return LiveState(
                status=run_status.status if run_status else None,
                run_status=run_status,
                evaluations=evaluations,
                evaluation_polled=evaluation_polled,
                evaluation_workers=evaluation_workers,
                waiting_for="; ".join(waiting),
                proposer_failing=propose_retrying(description),
            )
        if description.status == WorkflowExecutionStatus.COMPLETED:
            try:
                result: OptimizeResult = await handle.result(rpc_timeout=RPC_TIMEOUT)
            except Exception as error:
                return LiveState(status="failed", stop_reason=f"the workflow's result could not be read: {error}")
            return LiveState(status=result.status, stop_reason=result.stop_reason)
        reason = _CLOSED_AS_FAILED.get(description.status, "the workflow closed")
        if description.status == WorkflowExecutionStatus.FAILED:
            # The workflow's own failure says why (a proposer that cannot work, bad input).
            try:
                await handle.result(rpc_timeout=RPC_TIMEOUT)
            except WorkflowFailureError as error:
                cause = getattr(error.cause, "message", "") or str(error.cause or "")
                reason = f"{reason}: {cause}" if cause else reason
            except Exception:
                pass
        return LiveState(status="failed", stop_reason=reason)

    async def _evaluators_missing(self, client: Client, description) -> list[str]:
        """What to say when nobody polls the run's evaluation queue (from the memo the API set)."""
        try:
            queue = (await description.memo()).get(EVALUATE_QUEUE_MEMO)
        except Exception:
            return []
        if not isinstance(queue, str) or not queue:
            return []
        if await self._has_poller(client, queue, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
            return []
        arch = self.settings.arch_of(queue) or queue
        return [
            f"no evaluation worker polls task queue {queue}: start one on a {arch} machine "
            "(`marathon worker gpu`); without one the run pauses itself when its evaluation wait runs out"
        ]

    async def _query_status(self, handle) -> Optional[RunStatus]:
        try:
            return await handle.query("status", result_type=RunStatus, rpc_timeout=QUERY_TIMEOUT)
        except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError, asyncio.TimeoutError):
            # No worker is polling right now (or it is busy): the store still has the facts.
            return None

    async def query(self, run_id: str, name: str, result_type: Optional[type] = None) -> Any:
        client = await self.client()
        return await client.get_workflow_handle(run_id).query(name, result_type=result_type, rpc_timeout=QUERY_TIMEOUT)

    async def is_running(self, run_id: str) -> Optional[bool]:
        """True/False from Temporal; raises TemporalUnavailable when it cannot tell."""
        client = await self.client()
        try:
            description = await client.get_workflow_handle(run_id).describe(rpc_timeout=RPC_TIMEOUT)
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return False
            raise TemporalUnavailable(f"Temporal could not describe run {run_id}: {error.message}") from error
        return description.status == WorkflowExecutionStatus.RUNNING

    async def signal(self, run_id: str, name: str, arg: Any = None) -> None:
        client = await self.client()
        handle = client.get_workflow_handle(run_id)
        try:
            if arg is None:
                await handle.signal(name, rpc_timeout=RPC_TIMEOUT)
            else:
                await handle.signal(name, arg, rpc_timeout=RPC_TIMEOUT)
        except RPCError as error:
            raise TemporalUnavailable(
                f"Temporal could not deliver {name!r} to run {run_id}: {error.message}"
            ) from error

    async def update(self, run_id: str, name: str, arg: Any) -> Any:
        """Run a workflow update; it needs a worker, so without one polling it fails fast with the reason."""
        client = await self.client()
        handle = client.get_workflow_handle(run_id)
        try:
            queue = (await handle.describe(rpc_timeout=RPC_TIMEOUT)).task_queue
            if not await self._has_poller(client, queue, TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW):
                raise TemporalUnavailable(
                    f"no worker is serving run {run_id} (task queue {queue}): start one (marathon worker cpu) and retry"
                )
            return await handle.execute_update(name, arg, rpc_timeout=UPDATE_TIMEOUT)
        except WorkflowUpdateRPCTimeoutOrCancelledError as error:
            seconds = UPDATE_TIMEOUT.total_seconds()
            raise TemporalUnavailable(
                f"run {run_id} did not answer update {name!r} within {seconds:g} s: is its worker busy or down?"
            ) from error
        except RPCError as error:
            raise TemporalUnavailable(
                f"Temporal could not run update {name!r} on run {run_id}: {error.message}"
            ) from error

    async def workers(self) -> tuple[dict[str, str], list[str]]:
        """Which queues have a worker polling (the CPU queue always, evaluation queues when polled)
        and, in words, what is missing; ({}, [reason]) when Temporal cannot be asked."""
        try:
            client = await self.client()
        except TemporalUnavailable as error:
            return {}, [str(error)]
        cpu = self.settings.cpu_task_queue
        workflow_polled, activity_polled, archs = await asyncio.gather(
            self._has_poller(client, cpu, TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW),
            self._has_poller(client, cpu, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY),
            self.polled_archs(),
        )
        queues: dict[str, str] = {}
        missing: list[str] = []
        if workflow_polled and activity_polled:
            queues[cpu] = "polling"
        else:
            queues[cpu] = "no worker polls yet"
            missing.append(f"no CPU worker polls task queue {cpu} yet (marathon worker cpu)")
        for arch in archs:
            queues[self.settings.evaluate_queue(arch)] = "polling"
        if not archs:
            missing.append(
                f"no evaluation worker polls any {self.settings.evaluate_queue('<arch>')} task queue yet "
                "(marathon worker gpu)"
            )
        return queues, missing

    async def check(self) -> str:
        """'ok' or the reason Temporal is not usable (for the health route)."""
        try:
            client = await self.client()
            await client.service_client.check_health(timeout=timedelta(seconds=3))
        except Exception as error:
            return f"unreachable: {error}"
        return "ok"
