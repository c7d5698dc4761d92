"""/runs/{id}: steer a live run (pause, resume, stop, a new goal, a hint) and read its steering log.

Steering is data: each accepted request is written to the store's steering log just before the
workflow is signalled, and removed again if the signal or update fails (DESIGN.md, the loop).
"""

from __future__ import annotations

from dataclasses import asdict
from types import SimpleNamespace
from typing import Any, Optional

from fastapi import APIRouter, HTTPException, status
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from temporalio.client import WorkflowUpdateFailedError

from api import problem_catalog, run_lookup
from api import runs_service as service
from api.deps import AuthDep, SessionDep, SettingsDep, TemporalDep
from api.errors import invalid
from api.steering_outcome import ended_meanwhile
from api.schemas import (
    ActionAccepted,
    GoalChanged,
    GoalUpdate,
    HintAccepted,
    HintCreate,
    SteeringList,
    SteeringPublic,
)
from kernels.registry import get_problem
from store import repository
from store.db import session_scope
from store.models import SteeringEvent
from workflows.types import FINISHED_RUN_STATUSES, Goal

router = APIRouter(prefix="/runs", tags=["runs"], dependencies=[AuthDep], responses=run_lookup.ERRORS)

# Each signal a run takes without arguments, and the word for a run that can no longer take it.
ACTIONS = {"pause": "paused", "resume": "resumed", "stop": "stopped"}


async def _require_live(run_id: str, settings, temporal, doing: str):
    """404 for unknown runs, 409 for finished ones (the store's word, then Temporal's)."""
    run = await run_lookup.load_run(settings, run_id)
    if run.status in FINISHED_RUN_STATUSES:
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


async def _steer(settings, temporal, run_id: str, kind: str, detail: dict, deliver):
    """Note the request, then ``await deliver()``; the note is removed if delivery fails, and a
    failure because the run ended meanwhile is a 409 (it no longer takes steering), not a 503."""
    url = settings.resolved_database_url
    event_id = await run_in_threadpool(_note_steering, url, run_id, kind, detail)
    try:
        return await deliver()
    except BaseException as error:
        await run_in_threadpool(_forget_steering, url, event_id)
        if isinstance(error, Exception) and await ended_meanwhile(temporal, run_id):
            raise HTTPException(
                status.HTTP_409_CONFLICT, f"run {run_id} ended while this {kind} request was delivered; nothing changed"
            ) from None
        raise


def _action_route(action: str):
    async def act(run_id: str, settings: SettingsDep, temporal: TemporalDep) -> ActionAccepted:
        await _require_live(run_id, settings, temporal, ACTIONS[action])
        await _steer(settings, temporal, run_id, action, {}, lambda: temporal.signal(run_id, action))
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
    # The answer is built before the update is sent: once the run has the goal, nothing may fail.
    changed = GoalChanged(id=run_id, goal=asdict(goal))
    try:
        await _steer(settings, temporal, run_id, "goal", detail, lambda: temporal.update(run_id, "set_goal", goal))
    except WorkflowUpdateFailedError as error:
        cause = error.cause or error
        reason = getattr(cause, "message", "") or str(cause)
        raise RequestValidationError([invalid(["body"], f"the run refused the goal: {reason}", merged)]) from None
    # The store's goal is the workflow's to write (record_run, at its next step); GET shows the new
    # one at once from the status query.
    return changed


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
    from kernels.hints import check_hint
    from kernels.knob_space import KnobSpace

    space = KnobSpace(_space_module(problem_name, database_url))
    knobs, errors = check_hint(space, text)
    if errors:
        return knobs, errors, None, ""
    if proposer == "llm":
        return knobs, [], "llm", "the LLM proposer reads it in its next prompt"
    if proposer == "agent":
        return knobs, [], "agent", "the agent proposer reads it in the notebook (its read_notebook tool)"
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
    accepted = HintAccepted(
        id=run_id, signal="add_hint", hint=body.hint, kind=kind, knobs=knobs, proposer=proposer, read_by=read_by,
        note=note,
    )
    await _steer(settings, temporal, run_id, "hint", detail, lambda: temporal.signal(run_id, "add_hint", body.hint))
    return accepted


def steering_public(event: SteeringEvent) -> SteeringPublic:
    return SteeringPublic(
        id=event.id, kind=event.kind, detail=event.detail or {}, created_at=service.aware(event.created_at)
    )


@router.get("/{run_id}/steering", response_model=SteeringList)
def read_steering(
    run_id: str,
    session: SessionDep,
    offset: run_lookup.PageOffset = 0,
    limit: run_lookup.PageLimit = 100,
) -> SteeringList:
    """Every pause, resume, stop, goal change and hint the run was given, oldest first, with its
    time; kept in the store, so it is there after the run ends."""
    run_lookup.existing_run(session, run_id)
    events, count = repository.list_steering(session, run_id, offset=offset, limit=limit)
    return SteeringList(data=[steering_public(e) for e in events], count=count)
