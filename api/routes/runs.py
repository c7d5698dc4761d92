"""/runs: start, list, read and steer optimization runs."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any, Literal, Optional

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from api import lineage, llm_probe, problem_catalog
from api import runs_service as service
from api.deps import AuthDep, SessionDep, SettingsDep, TemporalDep
from api.errors import invalid
from api.schemas import (
    AttemptsPublic,
    Message,
    RunCreate,
    RunCreated,
    RunPublic,
    RunsPublic,
)
from api.temporal import TemporalUnavailable
from kernels.registry import builtin_problem_names, get_problem
from store import repository
from store.artifacts import get_text
from store.db import session_scope
from workflows import search_attributes as attrs
from workflows.types import FINISHED_RUN_STATUSES, RUN_STATUSES, OptimizeInput

ERRORS = {
    400: {"model": Message, "description": "The body is not UTF-8 JSON"},
    401: {"model": Message, "description": "Missing or invalid token"},
    404: {"model": Message, "description": "Unknown run"},
    409: {
        "model": Message,
        "description": "The run has finished, the proposer it asks for has no endpoint, or no worker that "
        "registered its problem polls",
    },
    413: {"model": Message, "description": "Request body too large"},
    503: {"model": Message, "description": "Temporal is not reachable, or no evaluation worker polls"},
}

router = APIRouter(prefix="/runs", tags=["runs"], dependencies=[AuthDep], responses=ERRORS)

ACTIONS = {"pause": "paused", "resume": "resumed", "stop": "stopped"}


def _not_found(error: service.RunNotFound) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, str(error))


async def _load(settings, run_id: str):
    try:
        return await run_in_threadpool(service.load_run, settings.resolved_database_url, run_id)
    except service.RunNotFound as error:
        raise _not_found(error) from None


def _check_problem(request: Request, name: str, database_url: str) -> list[dict]:
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


async def _evaluation_target(temporal, settings, gpu_arch: Optional[str]) -> tuple[str, str]:
    """The architecture a new run is evaluated on (the request's, else the first one a worker polls)
    and its evaluation queue, named here at the edge from the settings' prefix (the name's one owner)."""
    arch = gpu_arch or await _evaluation_arch(temporal, settings)
    return arch, settings.evaluate_queue(arch)


async def _check_problem_served(temporal, settings, name: str) -> None:
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


async def _check_proposer(temporal, settings, proposer) -> None:
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


async def _check_endpoint_reachable(proposer) -> None:
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


@router.post("", status_code=status.HTTP_201_CREATED, response_model=RunCreated)
async def create_run(body: RunCreate, request: Request, settings: SettingsDep, temporal: TemporalDep) -> RunCreated:
    """Start a run: the store row and the workflow are created together or not at all."""
    goal, budget, proposer = body.goal.to_goal(), body.budget.to_budget(), body.proposer.to_config()
    errors = await run_in_threadpool(_check_problem, request, body.problem, settings.resolved_database_url)
    errors += [invalid(["body", "goal"], message, body.goal.model_dump()) for message in goal.problems()]
    errors += [invalid(["body", "budget"], message, body.budget.model_dump()) for message in budget.problems()]
    errors += [invalid(["body", "proposer"], message, body.proposer.model_dump()) for message in proposer.problems()]
    url = settings.resolved_database_url
    if body.from_run is not None:
        parent = await run_in_threadpool(lineage.load_parent, url, body.from_run)
        refusals = lineage.fork_problems(parent, body.from_run, body.problem)
        errors += [invalid(["body", "from_run"], message, body.from_run) for message in refusals]
    if errors:
        raise RequestValidationError(errors)
    await _check_problem_served(temporal, settings, body.problem)
    await _check_proposer(temporal, settings, proposer)
    await _check_endpoint_reachable(proposer)
    arch, queue = await _evaluation_target(temporal, settings, body.gpu_arch)
    start_from = await lineage.start_from(temporal, url, body.from_run, "fork") if body.from_run else None
    run = OptimizeInput(
        run_id=service.new_run_id(body.problem),
        problem=body.problem,
        goal=goal,
        budget=budget,
        proposer=proposer,
        candidates_per_iteration=body.candidates_per_iteration,
        gpu_arch=arch,
        evaluate_task_queue=queue,
        start_from=start_from,
    )
    return await _launch(run, settings, temporal)


async def _launch(run: OptimizeInput, settings, temporal) -> RunCreated:
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


# How many live runs of one list page are asked for their phase and candidates (in parallel).
LIVE_IN_LIST = 20


def _list_runs(url: str, **filters):
    with session_scope(url, read_only=True) as session:
        return repository.list_runs(session, **filters)


@router.get("", response_model=RunsPublic)
async def read_runs(
    settings: SettingsDep,
    temporal: TemporalDep,
    status_filter: Annotated[Optional[Literal[RUN_STATUSES]], Query(alias="status")] = None,  # type: ignore[valid-type]
    problem: Annotated[Optional[str], Query(max_length=200, pattern=r"^[^\x00]*$")] = None,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> RunsPublic:
    """Runs newest first, as the store has them; the first live ones as their workflows answer
    (status, phase, candidates)."""
    runs, count = await run_in_threadpool(
        _list_runs, settings.resolved_database_url, status=status_filter, problem=problem, offset=offset, limit=limit
    )
    live_ids = [r.id for r in runs if r.status not in FINISHED_RUN_STATUSES][:LIVE_IN_LIST]
    states = dict(zip(live_ids, await asyncio.gather(*(temporal.live_state(i) for i in live_ids))))
    return RunsPublic(
        data=[service.to_public(r, settings, temporal.ui_url(r.id), states.get(r.id)) for r in runs], count=count
    )


@router.get("/{run_id}", response_model=RunPublic)
async def read_run(run_id: str, settings: SettingsDep, temporal: TemporalDep) -> RunPublic:
    """The store's row with Temporal's live state laid over it while the run is live (nothing is
    written: the workflow records its own progress, the reconciler ends rows whose workflow is gone)."""
    run = await _load(settings, run_id)
    live = await temporal.live_state(run_id) if run.status not in FINISHED_RUN_STATUSES else None
    busy = await run_in_threadpool(service.load_busy, settings.resolved_database_url, run_id)
    baseline = await run_in_threadpool(service.best_baseline, settings.resolved_database_url, run.best_attempt_id)
    return service.to_public(run, settings, temporal.ui_url(run_id), live, busy, baseline)


def _existing_run(session, run_id: str):
    run = repository.get_run(session, run_id) if service.plausible_run_id(run_id) else None
    if run is None:
        raise _not_found(service.RunNotFound(run_id))
    return run


@router.get("/{run_id}/attempts", response_model=AttemptsPublic)
def read_attempts(
    run_id: str,
    session: SessionDep,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> AttemptsPublic:
    _existing_run(session, run_id)
    attempts, count = repository.list_attempts(session, run_id, offset=offset, limit=limit)
    return AttemptsPublic(data=[service.attempt_public(a) for a in attempts], count=count)


def _text_or_none(session, sha: Optional[str]) -> Optional[str]:
    try:
        return get_text(session, sha) if sha else None
    except KeyError:
        return None


def _parse_report(report: Optional[str]) -> Any:
    if report is None:
        return None
    try:
        return json.loads(report)
    except ValueError:
        return report


@router.get(
    "/{run_id}/best",
    responses={200: {"content": {"text/x-python": {}, "application/json": {}}, "description": "The best kernel"}},
)
def read_best(run_id: str, session: SessionDep, format: Literal["file", "json"] = "file") -> Response:
    """The best kernel's source as a file download; ``?format=json`` adds its judge report."""
    run = _existing_run(session, run_id)
    best = repository.get_attempt(session, run.best_attempt_id) if run.best_attempt_id else None
    if best is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"run {run_id} has no best kernel yet")
    source = _text_or_none(session, best.source_sha)
    if source is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"the source of run {run_id}'s best kernel ({best.source_sha}) is missing"
        )
    attempt = service.attempt_public(best)
    if format == "json":
        report = _parse_report(_text_or_none(session, best.report_sha))
        return JSONResponse({"attempt": attempt.model_dump(mode="json"), "source": source, "report": report})
    headers = {
        "Content-Disposition": f'attachment; filename="{run_id}-best.py"',
        "X-Marathon-Iteration": str(attempt.iteration),
        "X-Marathon-Index": str(attempt.index),
        "X-Marathon-Speedup": "" if attempt.speedup is None else f"{attempt.speedup:.6g}",
        "X-Marathon-Report-Sha": attempt.report_sha or "",
    }
    return Response(source, media_type="text/x-python; charset=utf-8", headers=headers)
