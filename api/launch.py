"""Launching a run, shared by POST /runs (start, fork) and POST /runs/{id}/continue: the checks
that refuse a run before anything is written (its problem, its proposer's endpoint, a worker to
evaluate it) and the start itself (the store row, then the workflow; a failed start takes the row
back out)."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Optional

from fastapi import HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from api import llm_probe, problem_catalog
from api import runs_service as service
from api.errors import invalid
from api.schemas import RunCreated
from api.temporal import TemporalUnavailable
from kernels.registry import builtin_problem_names, get_problem
from store import repository
from store.db import session_scope
from workflows import search_attributes as attrs
from workflows.types import OptimizeInput, StartFrom


def check_problem(request: Request, name: str, database_url: str) -> list[dict]:
    """A built-in problem, one a worker registered, or (when enabled) an object path the API loads."""
    if ":" in name and not request.app.state.allow_problem_paths:
        return [
            invalid(
                ["body", "problem"], f"problem {name!r} is an object path; this API only runs registered problems", name
            )
        ]
    if ":" not in name:
        if name in builtin_problem_names() or problem_catalog.registered(database_url, name) is not None:
            return []
        return [invalid(["body", "problem"], problem_catalog.unknown_message(name, database_url), name)]
    try:
        get_problem(name)
    except ValueError as error:
        return [invalid(["body", "problem"], str(error), name)]
    except (ImportError, AttributeError) as error:
        return [invalid(["body", "problem"], f"problem {name!r} could not be loaded: {error}", name)]
    return []


def _search_attributes(run: OptimizeInput) -> TypedSearchAttributes:
    return TypedSearchAttributes(
        [
            SearchAttributePair(attrs.PROBLEM, attrs.keyword(run.problem)),
            SearchAttributePair(attrs.ITERATION, 0),
            SearchAttributePair(attrs.GOAL, attrs.keyword(run.goal.describe())),
            SearchAttributePair(attrs.STATUS, "running"),
        ]
    )


async def _evaluation_arch(temporal, settings) -> str:
    try:
        arch = await temporal.evaluation_arch(settings.worker_wait_s)
    except TemporalUnavailable as error:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, f"run not started: {error}") from None
    if arch is None:
        queues = settings.evaluate_queue("<arch>")
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            f"run not started: no evaluation worker polls any {queues} task queue "
            f"(waited {settings.worker_wait_s:g} s). Start one (`marathon up` starts one per GPU, or a "
            "CPU-mode one without a GPU; elsewhere `marathon worker gpu`), or give gpu_arch (e.g. \"sm90\") "
            "to queue the run for workers that will come",
        )
    return arch


async def evaluation_target(temporal, settings, gpu_arch: Optional[str]) -> tuple[str, str]:
    """The architecture a new run is evaluated on (the request's, else the first one a worker polls)
    and its evaluation queue, named here at the edge from the settings' prefix (the name's one owner)."""
    arch = gpu_arch or await _evaluation_arch(temporal, settings)
    return arch, settings.evaluate_queue(arch)


async def check_problem_served(temporal, settings, name: str) -> None:
    """Refuse a run on a registered problem when none of the CPU workers that registered it polls:
    the package it needs may be on no machine that is serving now."""
    if ":" in name or name in builtin_problem_names():
        return
    known = await run_in_threadpool(problem_catalog.registered, settings.resolved_database_url, name)
    if known is None:
        return
    try:
        polling = await temporal.cpu_identities(settings.worker_wait_s)
    except TemporalUnavailable as error:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, f"run not started: {error}") from None
    if set(polling) & set(known.workers):
        return
    raise HTTPException(
        status.HTTP_409_CONFLICT, problem_catalog.not_served_message(known, polling, settings.cpu_task_queue)
    )


async def check_proposer(temporal, settings, proposer) -> None:
    """Refuse an LLM run no CPU worker can serve: none polling has an endpoint configured."""
    if proposer.kind not in ("llm", "agent") or proposer.base_url:
        return
    try:
        polling, offering = await temporal.cpu_workers(settings.worker_wait_s)
    except TemporalUnavailable as error:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, f"run not started: {error}") from None
    if offering:
        return
    queue = settings.cpu_task_queue
    who = (
        f"none of the {polling} CPU worker(s) polling task queue {queue} has an LLM endpoint"
        if polling
        else f"no CPU worker polls task queue {queue}"
    )
    raise HTTPException(
        status.HTTP_409_CONFLICT,
        f"run not started: the {proposer.kind} proposer has no endpoint: {who}. Set MARATHON_LLM_BASE_URL "
        "(e.g. http://my-vllm:8000/v1), MARATHON_LLM_MODEL and, if the endpoint needs one, "
        "MARATHON_LLM_API_KEY in the CPU worker's environment (for `marathon up`, in its environment) "
        "and restart it; or give proposer.base_url in the request",
    )


async def check_endpoint_reachable(proposer) -> None:
    """Refuse (422) an LLM run whose endpoint, named in the request, does not answer at all."""
    if proposer.kind != "llm" or not proposer.base_url:
        return
    reason = await llm_probe.unreachable_reason(proposer.base_url)
    if reason:
        message = f"run not started: {reason}; start the endpoint or correct proposer.base_url"
        raise RequestValidationError([invalid(["body", "proposer", "base_url"], message, proposer.base_url)])


def _insert_run(url: str, run: OptimizeInput) -> None:
    with session_scope(url) as session:
        repository.create_run(
            session,
            run_id=run.run_id,
            problem=run.problem,
            goal=run.goal,
            budget=run.budget,
            proposer=run.proposer,
            candidates_per_iteration=run.candidates_per_iteration,
            workflow_id=run.run_id,
            from_run=run.start_from.run_id if run.start_from else None,
            from_kind=run.start_from.kind if run.start_from else None,
        )


def _delete_run(url: str, run_id: str) -> None:
    with session_scope(url) as session:
        repository.delete_run(session, run_id)


async def launch(run: OptimizeInput, settings, temporal) -> RunCreated:
    """Insert the store row, then start the workflow; a start that fails takes the row back out."""
    url = settings.resolved_database_url
    # The row goes first: the workflow's activities record attempts against it.
    await run_in_threadpool(_insert_run, url, run)
    try:
        await temporal.start(run, _search_attributes(run))
    except Exception as error:
        await temporal.terminate_quietly(run.run_id, "the API could not confirm the start")
        await run_in_threadpool(_delete_run, url, run.run_id)
        if isinstance(error, TemporalUnavailable):
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, f"run not started: {error}") from None
        raise
    return RunCreated(
        id=run.run_id,
        status="running",
        gpu_arch=run.gpu_arch,
        run_page_url=service.run_page_url(settings, run.run_id),
        temporal_url=temporal.ui_url(run.run_id),
    )


async def launch_new(temporal, settings, gpu_arch: Optional[str],
                     start_from: Optional[Callable[[], Awaitable[StartFrom]]], **fields: Any) -> RunCreated:
    """Launch a new run of ``fields`` (``OptimizeInput``'s problem, goal, budget, proposer, ...): it
    gets its id, its evaluation target (the request's ``gpu_arch``, else the first polled one) and
    then, for a fork or a continuation, what ``start_from()`` says it starts from."""
    if not fields.get("problem"):
        raise ValueError(f"a new run needs its problem among its fields, got {sorted(fields)}")
    arch, queue = await evaluation_target(temporal, settings, gpu_arch)
    run = OptimizeInput(
        run_id=service.new_run_id(fields["problem"]),
        gpu_arch=arch,
        evaluate_task_queue=queue,
        start_from=await start_from() if start_from is not None else None,
        **fields,
    )
    return await launch(run, settings, temporal)
