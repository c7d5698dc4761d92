"""POST /runs/{id}/continue: more budget for a finished run, as a new run linked to it.

Why a new run rather than restarting the parent's workflow id: each run keeps a bounded
history and an immutable record (a finished run stays finished, its page and attempts as they
were), the child can run on another device or with another goal, and the link (``from_run``,
``from_kind``) says where it came from. Forks go through POST /runs with ``from_run``.
"""

from __future__ import annotations

from fastapi import APIRouter, status
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError

from api import launch, lineage, run_lookup
from api import runs_service as service
from api.deps import AuthDep, SettingsDep, TemporalDep
from api.errors import invalid
from api.schemas import Message, RunContinue, RunCreated
from workflows.types import FINISHED_RUN_STATUSES, Goal, ProposerConfig

router = APIRouter(
    prefix="/runs",
    tags=["runs"],
    dependencies=[AuthDep],
    responses={
        **run_lookup.ERRORS,
        409: {"model": Message, "description": "The run is still live: stop it or fork it"},
    },
)


@router.post("/{run_id}/continue", status_code=status.HTTP_201_CREATED, response_model=RunCreated)
async def continue_run(
    run_id: str, settings: SettingsDep, temporal: TemporalDep, body: RunContinue | None = None
) -> RunCreated:
    """Continue a completed, stopped or failed run with more budget: a new run (linked as
    ``from_kind: "continue"``) that carries the parent's best kernel, judged again before it counts,
    its notebook, its problem, goal, proposer and settings, and numbers its iterations on from the
    parent's. A live run cannot be continued (409): stop it, or fork it."""
    body = body or RunContinue()
    url = settings.resolved_database_url
    parent = await run_in_threadpool(lineage.load_parent, url, run_id)
    if parent is None:
        raise lineage.ParentRefused(404, f"run {run_id} not found")
    live = None
    if parent.status not in FINISHED_RUN_STATUSES:
        live = await temporal.live_state(run_id)
        ended = service.ended_verdict(parent, live)
        if ended is not None:
            # Its workflow has ended without recording it: this request takes Temporal's word (the
            # row is detached, nothing is written; the background reconciler writes the store).
            parent.status, parent.stop_reason = ended
    lineage.check_continuable(parent, live)
    goal = body.goal.to_goal() if body.goal is not None else Goal(**parent.goal)
    budget = lineage.continued_budget(parent, body.iterations, body.hours)
    errors = [invalid(["body", "goal"], message, goal.describe()) for message in goal.problems()]
    errors += [invalid(["body", "iterations"], message, body.iterations) for message in budget.problems()]
    if errors:
        raise RequestValidationError(errors)
    proposer = ProposerConfig(**(parent.proposer or {}))
    await launch.check_proposer(temporal, settings, proposer)
    return await launch.launch_new(
        temporal,
        settings,
        body.gpu_arch,
        lambda: lineage.start_from(temporal, url, run_id, "continue"),
        problem=parent.problem,
        goal=goal,
        budget=budget,
        proposer=proposer,
        candidates_per_iteration=parent.candidates_per_iteration,
    )
