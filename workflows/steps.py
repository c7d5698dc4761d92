"""The loop's activity calls: each activity by name, with its task queue, timeouts and retry
policy, and what a failed call means to the run.

Activities are called by name, so nothing heavy (torch, triton, the store) is reachable from
the workflow. Each function schedules exactly one activity, as the workflow did inline before:
moving a call here changes no command of a run's history.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Optional, Sequence

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, TimeoutError as TemporalTimeoutError, TimeoutType

from workflows.types import (
    Candidate,
    CompactInput,
    CompactResult,
    EvaluateInput,
    EvaluateResult,
    ProposeInput,
    ProposeResult,
    RecordInput,
    RecordResult,
    RunProgressInput,
    RunProgressResult,
)

BAD_INPUT_ERRORS = ["BadInput", "BadProposeInput", "MissingArtifact", "ValueError", "KeyError", "TypeError"]

PROPOSE_TIMEOUT = timedelta(minutes=15)
# How long a dead worker holds up a run: Temporal hands the step to another worker once this
# much time passes without a heartbeat. Both activities heartbeat every few seconds from
# their event loop while the work runs in threads or subprocesses.
PROPOSE_HEARTBEAT = timedelta(seconds=20)
PROPOSE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    maximum_interval=timedelta(minutes=2),
    maximum_attempts=6,
    non_retryable_error_types=BAD_INPUT_ERRORS,
)
EVALUATE_HEARTBEAT = timedelta(seconds=20)
EVALUATE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=5),
    maximum_interval=timedelta(minutes=1),
    maximum_attempts=3,
    non_retryable_error_types=BAD_INPUT_ERRORS,
)
STORE_TIMEOUT = timedelta(seconds=60)
# The store may be down for a while (a database restart): keep trying rather than lose attempts.
STORE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=60),
    non_retryable_error_types=BAD_INPUT_ERRORS,
)
COMPACT_TIMEOUT = timedelta(minutes=5)
COMPACT_RETRY = RetryPolicy(maximum_attempts=3, non_retryable_error_types=BAD_INPUT_ERRORS)


async def propose(request: ProposeInput, summary: str) -> ProposeResult:
    """Activity "propose" on the workflow's own (CPU) queue."""
    return await workflow.execute_activity(
        "propose",
        request,
        result_type=ProposeResult,
        task_queue=workflow.info().task_queue,
        start_to_close_timeout=PROPOSE_TIMEOUT,
        heartbeat_timeout=PROPOSE_HEARTBEAT,
        retry_policy=PROPOSE_RETRY,
        summary=summary,
    )


async def evaluate(request: EvaluateInput, task_queue: str, gpu_wait_s: float, summary: str) -> EvaluateResult:
    """Activity "evaluate" on the evaluation queue. A call that waits more than ``gpu_wait_s`` to
    be picked up fails with a schedule-to-start timeout (see ``no_worker``)."""
    return await workflow.execute_activity(
        "evaluate",
        request,
        result_type=EvaluateResult,
        task_queue=task_queue,
        schedule_to_start_timeout=timedelta(seconds=gpu_wait_s),
        # One attempt may take the judge's own limit plus compile and baseline time.
        start_to_close_timeout=timedelta(seconds=request.timeout_s * 2 + 120),
        heartbeat_timeout=EVALUATE_HEARTBEAT,
        retry_policy=EVALUATE_RETRY,
        summary=summary,
    )


async def record(request: RecordInput, summary: str) -> RecordResult:
    """Activity "record": one attempt into the store."""
    return await workflow.execute_activity(
        "record",
        request,
        result_type=RecordResult,
        task_queue=workflow.info().task_queue,
        start_to_close_timeout=STORE_TIMEOUT,
        retry_policy=STORE_RETRY,
        summary=summary,
    )


async def compact(request: CompactInput, summary: str) -> CompactResult:
    """Activity "compact": the notebook folded, by an LLM where one is configured."""
    return await workflow.execute_activity(
        "compact",
        request,
        result_type=CompactResult,
        task_queue=workflow.info().task_queue,
        start_to_close_timeout=COMPACT_TIMEOUT,
        retry_policy=COMPACT_RETRY,
        summary=summary,
    )


async def record_run(request: RunProgressInput) -> RunProgressResult:
    """Activity "record_run": the run row's status, iteration, best and budget used."""
    return await workflow.execute_activity(
        "record_run",
        request,
        result_type=RunProgressResult,
        task_queue=workflow.info().task_queue,
        start_to_close_timeout=STORE_TIMEOUT,
        retry_policy=STORE_RETRY,
        summary=f"run {request.status}",
    )


# ---- what a failed call means -----------------------------------------------------------------


def no_worker(error: BaseException) -> bool:
    """True for an activity nobody picked up in time: the GPU pool is missing."""
    cause = getattr(error, "cause", None)
    return (
        isinstance(error, ActivityError)
        and isinstance(cause, TemporalTimeoutError)
        and cause.type == TimeoutType.SCHEDULE_TO_START
    )


def failure_message(error: BaseException) -> str:
    """The error and up to three of its causes, joined: what the run's notes say went wrong."""
    parts = []
    current: Optional[BaseException] = error
    while current is not None and len(parts) < 4:
        parts.append(str(current) or type(current).__name__)
        current = getattr(current, "cause", None)
    return ": ".join(parts)


def evaluation_results(
    candidates: Sequence[Candidate], outcomes: Sequence[object]
) -> tuple[list[EvaluateResult], bool]:
    """One result per candidate from the evaluations' outcomes (results or exceptions, one per
    candidate without a proposal error, in order), and whether some evaluation found no worker.

    A candidate the proposer could not write is a ``proposal_error``; an evaluation that failed
    is ``crashed``. An exception that is not an activity's failure is raised again.
    """
    remaining = iter(outcomes)
    results: list[EvaluateResult] = []
    missing_worker = False
    for candidate in candidates:
        if candidate.error is not None:
            results.append(EvaluateResult(status="proposal_error", message=candidate.error, timing_kind=""))
            continue
        outcome = next(remaining)
        if isinstance(outcome, EvaluateResult):
            results.append(outcome)
        elif no_worker(outcome):
            missing_worker = True
        elif isinstance(outcome, ActivityError):
            results.append(EvaluateResult(status="crashed", message=f"evaluation failed: {failure_message(outcome)}"))
        else:
            raise outcome
    return results, missing_worker
