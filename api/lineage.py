"""Parents of continued and forked runs: what the API reads of a parent to seed its child.

A continued or forked run is a new run (its own workflow and bounded history) that carries the
parent's champion by artifact sha and the parent's notebook (``workflows.types.StartFrom``).
The notebook comes from the parent's workflow (its ``notebook`` query answers while a worker
serves it, also after the run ended); without an answer it is rebuilt from the store's
attempts and hints, which outlive every workflow.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from fastapi import HTTPException
from fastapi.concurrency import run_in_threadpool

from api import runs_service as service
from api.temporal import LiveState
from store import repository
from store.db import session_scope
from store.models import Attempt, Run
from workflows import notebook as nb
from workflows.types import FINISHED_RUN_STATUSES, BestKernel, Budget, Notebook, NotebookEntry, StartFrom

# A notebook rebuilt from the store folds at most this many of the parent's latest attempts.
STORE_NOTEBOOK_ATTEMPTS = 200
STORE_NOTEBOOK_KEEP = 20


class ParentRefused(HTTPException):
    """The parent cannot seed the child: the API answers ``status_code`` (404, 409) with the reason."""

    def __init__(self, status_code: int, message: str):
        super().__init__(status_code, message)


def load_parent(url: str, run_id: str) -> Optional[Run]:
    if not service.plausible_run_id(run_id):
        return None
    with session_scope(url, read_only=True) as session:
        return repository.get_run(session, run_id)


def fork_problems(parent: Optional[Run], parent_id: str, problem: str) -> list[str]:
    """Why ``parent_id`` cannot be forked into a run of ``problem``; empty when it can."""
    if parent is None:
        return [f"no run {parent_id} to fork; see GET /runs (or `marathon runs`) for the ids"]
    if parent.problem != problem:
        return [
            f"run {parent_id} optimizes problem {parent.problem!r}, not {problem!r}; a fork keeps "
            f"its parent's problem (give \"problem\": \"{parent.problem}\")"
        ]
    return []


def check_continuable(parent: Run, live: Optional[LiveState]) -> None:
    """A run can be continued once it has ended; a live one can only be forked (409 says so)."""
    if parent.status in FINISHED_RUN_STATUSES:
        return
    status = (live.status if live else None) or parent.status
    raise ParentRefused(
        409,
        f"run {parent.id} is still {status}: only a finished, stopped or failed run can be continued. "
        f"Stop it first (POST /runs/{parent.id}/stop, `marathon stop {parent.id}`), or fork it now "
        f"(POST /runs with \"from_run\": \"{parent.id}\", `marathon run {parent.problem} --from {parent.id}`)",
    )


def continued_budget(parent: Run, more_iterations: Optional[int], hours: Optional[float]) -> Budget:
    """The parent's budget with room for ``more_iterations`` beyond the parent's count (default: the
    parent's iteration budget again); hours, GPU seconds and tokens count afresh in the child."""
    budget = Budget(**(parent.budget or {}))
    more = more_iterations if more_iterations is not None else budget.iterations
    return replace(budget, iterations=parent.iteration + more, hours=hours if hours is not None else budget.hours)


def champion_of(attempt: Attempt) -> BestKernel:
    return BestKernel(
        iteration=attempt.iteration,
        index=attempt.index,
        source_sha=attempt.source_sha,
        strategy=attempt.strategy or "",
        speedup=attempt.speedup,
        roofline=attempt.roofline,
        report_sha=attempt.report_sha,
        timing_kind=attempt.timing_kind,
        knobs=dict(attempt.knobs) if attempt.knobs is not None else None,
    )


def notebook_from_store(session, run_id: str) -> Notebook:
    """The parent's notebook as the store has it: its latest attempts (older ones folded into the
    lessons, as a compaction does) and the hints it was given."""
    attempts = list(reversed(repository.recent_attempts(session, run_id, limit=STORE_NOTEBOOK_ATTEMPTS)))
    notebook = Notebook(
        entries=[
            NotebookEntry(
                iteration=a.iteration,
                index=a.index,
                strategy=a.strategy or "",
                status=a.status,
                speedup=a.speedup,
                note=(a.message or "").strip().split("\n")[0][: nb.NOTE_LIMIT],
            )
            for a in attempts
        ]
    )
    events, _ = repository.list_steering(session, run_id, limit=1000)
    for event in events:
        if event.kind == "hint":
            nb.add_hint(notebook, str((event.detail or {}).get("hint", "")))
    if len(notebook.entries) > STORE_NOTEBOOK_KEEP:
        notebook = nb.compact(notebook, STORE_NOTEBOOK_KEEP)
    return notebook


def _from_store(url: str, parent_id: str) -> tuple[Optional[BestKernel], Notebook, int]:
    with session_scope(url, read_only=True) as session:
        run = repository.get_run(session, parent_id)
        if run is None:
            raise ParentRefused(404, f"run {parent_id} not found")
        best = repository.get_attempt(session, run.best_attempt_id) if run.best_attempt_id else None
        return (champion_of(best) if best is not None else None), notebook_from_store(session, parent_id), run.iteration


async def workflow_notebook(temporal, run_id: str) -> Optional[Notebook]:
    """The parent workflow's own notebook (lessons, findings, LLM lessons included); None when no
    worker answers the query in time."""
    try:
        return await temporal.query(run_id, "notebook", Notebook)
    except Exception:
        return None


async def start_from(temporal, url: str, parent_id: str, kind: str) -> StartFrom:
    """What the child of ``parent_id`` starts from: the champion (by sha) and the notebook, and for a
    continuation the parent's iteration count."""
    champion, stored, iteration = await run_in_threadpool(_from_store, url, parent_id)
    notebook = await workflow_notebook(temporal, parent_id)
    return StartFrom(
        run_id=parent_id,
        kind=kind,
        champion=champion,
        notebook=notebook if isinstance(notebook, Notebook) else stored,
        iteration=iteration if kind == "continue" else 0,
    )
