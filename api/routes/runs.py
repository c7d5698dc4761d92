"""/runs: start, list, read and steer optimization runs."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any, Literal, Optional

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from api import launch, lineage, run_lookup
from api import runs_service as service
from api.deps import AuthDep, SessionDep, SettingsDep, TemporalDep
from api.errors import invalid
from api.schemas import AttemptsPublic, RunCreate, RunCreated, RunPublic, RunsPublic
from store import repository
from store.db import session_scope
from workflows.types import FINISHED_RUN_STATUSES, RUN_STATUSES

router = APIRouter(prefix="/runs", tags=["runs"], dependencies=[AuthDep], responses=run_lookup.ERRORS)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=RunCreated)
async def create_run(body: RunCreate, request: Request, settings: SettingsDep, temporal: TemporalDep) -> RunCreated:
    """Start a run: the store row and the workflow are created together or not at all."""
    goal, budget, proposer = body.goal.to_goal(), body.budget.to_budget(), body.proposer.to_config()
    errors = await run_in_threadpool(launch.check_problem, request, body.problem, settings.resolved_database_url)
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
    await launch.check_problem_served(temporal, settings, body.problem)
    await launch.check_proposer(temporal, settings, proposer)
    await launch.check_endpoint_reachable(proposer)
    fork = (lambda: lineage.start_from(temporal, url, body.from_run, "fork")) if body.from_run else None
    return await launch.launch_new(
        temporal,
        settings,
        body.gpu_arch,
        fork,
        problem=body.problem,
        goal=goal,
        budget=budget,
        proposer=proposer,
        candidates_per_iteration=body.candidates_per_iteration,
        evaluations_in_flight=body.evaluations_in_flight,
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
    run = await run_lookup.load_run(settings, run_id)
    live = await temporal.live_state(run_id) if run.status not in FINISHED_RUN_STATUSES else None
    busy = await run_in_threadpool(service.load_busy, settings.resolved_database_url, run_id)
    baseline = await run_in_threadpool(service.best_baseline, settings.resolved_database_url, run.best_attempt_id)
    return service.to_public(run, settings, temporal.ui_url(run_id), live, busy, baseline)


@router.get("/{run_id}/attempts", response_model=AttemptsPublic)
def read_attempts(
    run_id: str,
    session: SessionDep,
    offset: run_lookup.PageOffset = 0,
    limit: run_lookup.PageLimit = 50,
) -> AttemptsPublic:
    run_lookup.existing_run(session, run_id)
    attempts, count = repository.list_attempts(session, run_id, offset=offset, limit=limit)
    return AttemptsPublic(data=[service.attempt_public(a) for a in attempts], count=count)


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
    run = run_lookup.existing_run(session, run_id)
    best = repository.get_attempt(session, run.best_attempt_id) if run.best_attempt_id else None
    if best is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"run {run_id} has no best kernel yet")
    source = run_lookup.text_or_none(session, best.source_sha)
    if source is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"the source of run {run_id}'s best kernel ({best.source_sha}) is missing"
        )
    attempt = service.attempt_public(best)
    if format == "json":
        report = _parse_report(run_lookup.text_or_none(session, best.report_sha))
        return JSONResponse({"attempt": attempt.model_dump(mode="json"), "source": source, "report": report})
    headers = {
        "Content-Disposition": f'attachment; filename="{run_id}-best.py"',
        "X-Marathon-Iteration": str(attempt.iteration),
        "X-Marathon-Index": str(attempt.index),
        "X-Marathon-Speedup": "" if attempt.speedup is None else f"{attempt.speedup:.6g}",
        "X-Marathon-Report-Sha": attempt.report_sha or "",
    }
    return Response(source, media_type="text/x-python; charset=utf-8", headers=headers)
