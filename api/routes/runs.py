"""/runs: start, list, read and steer optimization runs."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from types import SimpleNamespace
from typing import Annotated, Any, Literal, Optional

from fastapi import APIRouter, HTTPException, Path, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from temporalio.client import WorkflowUpdateFailedError
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from api import lineage, problem_catalog
from api import runs_service as service
from api.deps import INVALID_TOKEN, MISSING_TOKEN, AuthDep, SessionDep, SettingsDep, TemporalDep, page_token_state
from api.errors import invalid
from api.schemas import (
    ActionAccepted,
    AttemptsPublic,
    GoalChanged,
    GoalUpdate,
    HintAccepted,
    HintCreate,
    LLMExchange,
    Message,
    RunCreate,
    RunCreated,
    RunPublic,
    RunsPublic,
    SteeringList,
    SteeringPublic,
)
from api.temporal import TemporalUnavailable
from kernels.registry import builtin_problem_names, get_problem
from store import repository
from store.artifacts import get_text
from store.db import session_scope
from store.models import SteeringEvent
from workflows import search_attributes as attrs
from workflows.types import RUN_STATUSES, Goal, OptimizeInput

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
        queues = f"{settings.gpu_task_queue_prefix}<arch>"
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            f"run not started: no evaluation worker polls any {queues} task queue "
            f"(waited {settings.worker_wait_s:g} s). Start one (`marathon up` starts one per GPU, or a "
            "CPU-mode one without a GPU; elsewhere `marathon worker gpu`), or give gpu_arch (e.g. \"sm90\") "
            "to queue the run for workers that will come",
        )
    return arch


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
    if proposer.kind != "llm" or proposer.base_url:
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
        f"run not started: the llm proposer has no endpoint: {who}. Set MARATHON_LLM_BASE_URL "
        "(e.g. http://my-vllm:8000/v1), MARATHON_LLM_MODEL and, if the endpoint needs one, "
        "MARATHON_LLM_API_KEY in the CPU worker's environment (for `marathon up`, in its environment) "
        "and restart it; or give proposer.base_url in the request",
    )


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
    arch = body.gpu_arch or await _evaluation_arch(temporal, settings)
    start_from = await lineage.start_from(temporal, url, body.from_run, "fork") if body.from_run else None
    run = OptimizeInput(
        run_id=service.new_run_id(body.problem),
        problem=body.problem,
        goal=goal,
        budget=budget,
        proposer=proposer,
        candidates_per_iteration=body.candidates_per_iteration,
        gpu_arch=arch,
        # The queue's name has one owner: the settings' prefix, here at the edge.
        evaluate_task_queue=f"{settings.gpu_task_queue_prefix}{arch}",
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
    live_ids = [r.id for r in runs if r.status not in service.TERMINAL_STATUSES][:LIVE_IN_LIST]
    states = dict(zip(live_ids, await asyncio.gather(*(temporal.live_state(i) for i in live_ids))))
    return RunsPublic(
        data=[service.to_public(r, settings, temporal.ui_url(r.id), states.get(r.id)) for r in runs], count=count
    )


@router.get("/{run_id}", response_model=RunPublic)
async def read_run(run_id: str, settings: SettingsDep, temporal: TemporalDep) -> RunPublic:
    """The store's row with Temporal's live state laid over it while the run is live (nothing is
    written: the workflow records its own progress, the reconciler ends rows whose workflow is gone)."""
    run = await _load(settings, run_id)
    live = await temporal.live_state(run_id) if run.status not in service.TERMINAL_STATUSES else None
    return service.to_public(run, settings, temporal.ui_url(run_id), live)


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


async def _require_live(run_id: str, settings, temporal, doing: str):
    """404 for unknown runs, 409 for finished ones (the store's word, then Temporal's)."""
    run = await _load(settings, run_id)
    if run.status in service.TERMINAL_STATUSES:
        raise HTTPException(status.HTTP_409_CONFLICT, f"run {run_id} is {run.status}; it can no longer be {doing}")
    if not await temporal.is_running(run_id):
        live = await temporal.live_state(run_id)
        final = live.status or "finished"
        raise HTTPException(status.HTTP_409_CONFLICT, f"run {run_id} is {final}; it can no longer be {doing}")
    return run


# Steering is written by the API, not by the workflow: the API is where a person's request
# arrives, with its time, and it writes one row per accepted request. The row goes in before
# the signal or update and is taken out again when Temporal refuses it or cannot be reached, so
# the log holds exactly the requests the workflow was given (a retried HTTP request is a second
# request and a second signal, so a second row). The workflow then needs no extra activity,
# nothing in its history, and no idempotency key to keep a retried activity from writing twice.
def _note_steering(url: str, run_id: str, kind: str, detail: dict) -> int:
    with session_scope(url) as session:
        return repository.add_steering(session, run_id=run_id, kind=kind, detail=detail).id


def _forget_steering(url: str, event_id: int) -> None:
    with session_scope(url) as session:
        repository.delete_steering(session, event_id)


async def _steer(settings, run_id: str, kind: str, detail: dict, deliver):
    """Note the request, then ``await deliver()``; the note is removed if delivery fails."""
    url = settings.resolved_database_url
    event_id = await run_in_threadpool(_note_steering, url, run_id, kind, detail)
    try:
        return await deliver()
    except BaseException:
        await run_in_threadpool(_forget_steering, url, event_id)
        raise


def _action_route(action: str):
    async def act(run_id: str, settings: SettingsDep, temporal: TemporalDep) -> ActionAccepted:
        await _require_live(run_id, settings, temporal, ACTIONS[action])
        await _steer(settings, run_id, action, {}, lambda: temporal.signal(run_id, action))
        return ActionAccepted(id=run_id, signal=action)

    act.__name__ = f"{action}_run"
    act.__doc__ = f"Send the {action!r} signal to a live run."
    return act


for _action in ACTIONS:
    router.add_api_route(
        f"/{{run_id}}/{_action}",
        _action_route(_action),
        methods=["POST"],
        status_code=status.HTTP_202_ACCEPTED,
        response_model=ActionAccepted,
        name=f"{_action}_run",
    )


@router.patch("/{run_id}/goal", response_model=GoalChanged)
async def update_goal(run_id: str, body: GoalUpdate, settings: SettingsDep, temporal: TemporalDep) -> GoalChanged:
    """Change the goal of a live run through the workflow's validated ``set_goal`` update."""
    run = await _require_live(run_id, settings, temporal, "changed")
    merged = {**run.goal, **body.model_dump(exclude_none=True)}
    goal = Goal(**merged)
    problems = goal.problems()
    if problems:
        raise RequestValidationError([invalid(["body"], message, merged) for message in problems])
    detail = {"goal": asdict(goal), "previous": run.goal}
    try:
        await _steer(settings, run_id, "goal", detail, lambda: temporal.update(run_id, "set_goal", goal))
    except WorkflowUpdateFailedError as error:
        cause = error.cause or error
        reason = getattr(cause, "message", "") or str(cause)
        raise RequestValidationError([invalid(["body"], f"the run refused the goal: {reason}", merged)]) from None
    # The store's goal is the workflow's to write (record_run, at its next step); GET shows the new
    # one at once from the status query.
    return GoalChanged(id=run_id, goal=asdict(goal))


def _space_module(problem_name: str, database_url: str) -> Any:
    """The problem's space module; for a registered problem whose package the API lacks, its
    registered knobs (enough to check a hint; rendering happens on the worker)."""
    try:
        return get_problem(problem_name).load_space()
    except (ValueError, ImportError, AttributeError):
        known = problem_catalog.registered(database_url, problem_name)
        if known is None:
            raise
        knobs = known.description.get("knobs", [])
        return SimpleNamespace(__name__=f"{problem_name} (registered)", render=None,
                               SPACE={k["name"]: tuple(k["values"]) for k in knobs},
                               DEFAULT={k["name"]: k["default"] for k in knobs})


def _check_hint(
    problem_name: str, proposer: str, text: str, database_url: str
) -> tuple[dict, list[str], Optional[str], str]:
    """(knob settings, errors, the proposer that reads the hint, a note saying what happens)."""
    from activities.proposers.hints import check_hint
    from activities.proposers.knob_space import KnobSpace

    space = KnobSpace(_space_module(problem_name, database_url))
    knobs, errors = check_hint(space, text)
    if errors:
        return knobs, errors, None, ""
    if proposer == "llm":
        return knobs, [], "llm", "the LLM proposer reads it in its next prompt"
    if knobs:
        settings = " ".join(f"{k}={v}" for k, v in knobs.items())
        return knobs, [], "search", f"the search proposer tries {settings} on the best point in its next iteration"
    return knobs, [], None, (
        "kept in the notebook and the steering log, but this run's search proposer reads only knob settings "
        "(name=value, see GET /problems); free text is read by the LLM proposer"
    )


@router.post("/{run_id}/hints", status_code=status.HTTP_202_ACCEPTED, response_model=HintAccepted)
async def create_hint(run_id: str, body: HintCreate, settings: SettingsDep, temporal: TemporalDep) -> HintAccepted:
    """Give the proposer a hint (it lands in the run's notebook). ``name=value`` sets a knob of the
    problem (``GET /problems`` lists them; an unknown knob or value is 422) and the search
    proposer tries it; free text goes to the LLM proposer."""
    run = await _require_live(run_id, settings, temporal, "given hints")
    proposer = str((run.proposer or {}).get("kind", "search"))
    knobs, errors, read_by, note = await run_in_threadpool(
        _check_hint, run.problem, proposer, body.hint, settings.resolved_database_url
    )
    if errors:
        raise RequestValidationError([invalid(["body", "hint"], message, body.hint) for message in errors])
    kind = "knobs" if knobs else "text"
    detail = {"hint": body.hint, "kind": kind, "knobs": knobs, "read_by": read_by}
    await _steer(settings, run_id, "hint", detail, lambda: temporal.signal(run_id, "add_hint", body.hint))
    return HintAccepted(
        id=run_id, signal="add_hint", hint=body.hint, kind=kind, knobs=knobs, proposer=proposer, read_by=read_by,
        note=note,
    )


def steering_public(event: SteeringEvent) -> SteeringPublic:
    return SteeringPublic(
        id=event.id, kind=event.kind, detail=event.detail or {}, created_at=service.aware(event.created_at)
    )


@router.get("/{run_id}/steering", response_model=SteeringList)
def read_steering(
    run_id: str,
    session: SessionDep,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> SteeringList:
    """Every pause, resume, stop, goal change and hint the run was given, oldest first, with its
    time; kept in the store, so it is there after the run ends."""
    _existing_run(session, run_id)
    events, count = repository.list_steering(session, run_id, offset=offset, limit=limit)
    return SteeringList(data=[steering_public(e) for e in events], count=count)


# The LLM exchange is linked from the run page, which a browser opens with the token cookie
# rather than a header: this route takes either.
page_router = APIRouter(prefix="/runs", tags=["runs"], responses=ERRORS)

# Attempt ids are the store's 64-bit integer keys: a larger number is a bad request (422), not a
# lookup the database driver cannot even express.
ATTEMPT_ID_MAX = 2**63 - 1


def _llm_exchange(url: str, run_id: str, attempt_id: int) -> LLMExchange:
    with session_scope(url, read_only=True) as session:
        attempt = repository.get_attempt(session, attempt_id) if service.plausible_run_id(run_id) else None
        if attempt is None or attempt.run_id != run_id:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"run {run_id} has no attempt {attempt_id}")
        if not attempt.llm_sha:
            raise HTTPException(
                status.HTTP_404_NOT_FOUND, f"attempt {attempt_id} of run {run_id} was not written by an LLM"
            )
        text = _text_or_none(session, attempt.llm_sha)
        if text is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"the LLM exchange {attempt.llm_sha} is missing")
        return LLMExchange(
            attempt_id=attempt.id,
            run_id=run_id,
            iteration=attempt.iteration,
            index=attempt.index,
            llm_sha=attempt.llm_sha,
            transcript=json.loads(text),
        )


def _exchange_text(exchange: LLMExchange) -> str:
    transcript = exchange.transcript
    lines = [
        f"run {exchange.run_id}, iteration {exchange.iteration}, candidate {exchange.index} "
        f"(attempt {exchange.attempt_id})",
        f"model {transcript.get('model', '?')} at {transcript.get('endpoint', '?')}, "
        f"{transcript.get('tokens', '?')} tokens",
    ]
    for message in transcript.get("messages", []):
        lines += ["", f"===== {message.get('role', '?')} =====", str(message.get("content", ""))]
    lines += ["", "===== reply =====", str(transcript.get("reply", ""))]
    return "\n".join(lines) + "\n"


@page_router.get(
    "/{run_id}/attempts/{attempt_id}/llm",
    response_model=LLMExchange,
    responses={200: {"content": {"application/json": {}, "text/plain": {}}}},
)
async def read_llm_exchange(
    run_id: str,
    attempt_id: Annotated[int, Path(ge=1, le=ATTEMPT_ID_MAX, description="the attempt's id, from its run's attempts")],
    request: Request, format: Literal["json", "text"] = "json"
) -> Response:
    """What the LLM was asked and answered for one attempt (the API key and anything like it
    redacted, long texts clipped). ``?format=text`` reads well in a browser (the run page links it)."""
    state = await page_token_state(request)
    if state != "ok":
        detail = MISSING_TOKEN if state == "missing" else INVALID_TOKEN
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"})
    url = request.app.state.settings.resolved_database_url
    exchange = await run_in_threadpool(_llm_exchange, url, run_id, attempt_id)
    if format == "text":
        return PlainTextResponse(_exchange_text(exchange), headers={"X-Content-Type-Options": "nosniff"})
    return JSONResponse(exchange.model_dump(mode="json"))
