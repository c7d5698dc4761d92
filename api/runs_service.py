"""Store-side steps of the run routes, as plain functions the async handlers run in a thread."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from typing import Any, Optional

from api.schemas import AttemptPublic, RunPublic
from api.temporal import LiveState, PendingEvaluation
from marathon.settings import Settings
from store import repository
from store.artifacts import get_text
from store.busy import RunBusy, attempt_fractions, run_fractions
from store.db import session_scope
from store.models import Attempt, Run
from workflows.proposer_health import FAILING_PREFIX
from workflows.types import FINISHED_RUN_STATUSES, Goal

# A run row whose workflow Temporal has never heard of after this long was left by a start that
# died half-way (the API crashed between the insert and the start): reads show it failed and the
# reconciler (api/reconciler.py) writes it so.
ORPHAN_GRACE = timedelta(minutes=2)
NEVER_STARTED = "the run's workflow was never started in Temporal"


class RunNotFound(Exception):
    def __init__(self, run_id: str):
        super().__init__(f"run {run_id} not found")


def new_run_id(problem: str) -> str:
    """``kda-1f3c…``: the problem's name (the attribute of an object path) plus a random suffix."""
    slug = re.sub(r"[^a-z0-9]+", "-", problem.rpartition(":")[2].lower()).strip("-")[:40] or "run"
    return f"{slug}-{uuid.uuid4().hex[:12]}"


def run_page_url(settings: Settings, run_id: str) -> str:
    return f"{settings.api_url.rstrip('/')}/runs/{run_id}/page"


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


aware = _aware


def llm_url(attempt: Attempt) -> Optional[str]:
    """The route serving the attempt's LLM prompt and reply, when an LLM wrote it."""
    return f"/runs/{attempt.run_id}/attempts/{attempt.id}/llm" if attempt.llm_sha else None


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"


# A proposed candidate the run has not sent to an evaluation worker yet: its window of
# evaluations in flight (``evaluations_in_flight``) is full.
WINDOW_WAIT = "queued in the run (its evaluation window is full)"


def live_candidates(live: LiveState) -> list[dict[str, Any]]:
    """The status query's candidates, those still evaluating told apart by Temporal's pending
    activities: started on a worker, or scheduled and waiting for one (matched in the order the
    workflow scheduled them)."""
    status = live.run_status
    if status is None:
        return []
    rows = [{"index": c.index, "strategy": c.strategy, "state": c.state, "iteration": c.iteration}
            for c in status.candidates]
    for row in rows:
        if row["state"] == "proposed":  # the run holds it until its window has a free slot: normal too
            row["state"] = WINDOW_WAIT
    in_flight = [row for row in rows if row["state"] in ("evaluating", "confirming")]
    if len(in_flight) != len(live.evaluations):
        return rows  # an evaluation just finished and the workflow has not seen it yet: no matching
    # Activity ids follow the order the workflow scheduled them in, which is the candidates' order.
    for row, pending in zip(in_flight, live.evaluations):
        if pending.started:
            continue
        if pending.attempt > 1:
            row["state"] = f"waiting to retry (attempt {pending.attempt})"
        elif live.evaluation_polled:
            row["state"] = f"queued ({_duration(pending.waiting_s)})"  # the workers are busy: normal
        else:
            row["state"] = f"waiting for an evaluation worker ({_duration(pending.waiting_s)})"
    return rows


def waiting_line(live: LiveState) -> str:
    """A line when evaluations wait for a worker to start them; "" when none does."""
    waiting: list[PendingEvaluation] = [e for e in live.evaluations if not e.started and e.attempt <= 1]
    if not waiting:
        return ""
    queue = (live.run_status.evaluate_queue if live.run_status else "") or waiting[0].task_queue or "its queue"
    longest = max(e.waiting_s for e in waiting)
    count = f"{len(waiting)} candidate{'s' if len(waiting) != 1 else ''}"
    if live.evaluation_polled:
        # Every worker is busy: the candidates wait their turn, as they normally do.
        workers = live.evaluation_workers
        return f"queued: {count}, {workers} evaluation worker{'s' if workers != 1 else ''} busy on {queue}"
    why = " (no evaluation worker polls that queue: start one for this architecture)" \
        if live.evaluation_polled is False else ""
    return f"WAITING for an evaluation worker: {count} on {queue} not started for {_duration(longest)}{why}"


def proposer_failing(run: Run, live: Optional[LiveState]) -> str:
    """What a running run says of a failing proposer: the retry Temporal holds now, else the
    workflow's count of iterations without a candidate (its status message, or the store's note)."""
    if live is not None and live.proposer_failing:
        return live.proposer_failing
    status = live.run_status if live is not None else None
    for note in (status.message if status else "", run.stop_reason or ""):
        if note.startswith(FAILING_PREFIX):
            return note
    return ""


def to_public(
    run: Run, settings: Settings, temporal_url: str, live: Optional[LiveState] = None, busy: Optional[RunBusy] = None,
    baseline: str = "",
) -> RunPublic:
    """The run as the API shows it; ``busy`` (``load_busy``) adds its GPU figures."""
    goal = Goal(**run.goal)
    fields: dict[str, Any] = dict(
        id=run.id,
        problem=run.problem,
        status=run.status,
        goal=run.goal,
        budget=run.budget,
        proposer=run.proposer,
        candidates_per_iteration=run.candidates_per_iteration,
        iteration=run.iteration,
        best_speedup=run.best_speedup,
        best_attempt_id=run.best_attempt_id,
        # The store keeps the best speedup only: a roofline goal's distance is unknown here (1.0).
        distance=goal.distance(goal.score(speedup=run.best_speedup, roofline=None)),
        stop_reason=run.stop_reason,
        budget_used=run.budget_used or {},
        created_at=_aware(run.created_at),
        updated_at=_aware(run.updated_at),
        run_page_url=run_page_url(settings, run.id),
        temporal_url=temporal_url,
        waiting_for=live.waiting_for if live else "",
        from_run=run.from_run,
        from_kind=run.from_kind,
    )
    if baseline:
        fields["baseline"] = baseline
    if busy is not None and busy.attempts:
        fields.update(
            evaluation_gpu_s=round(busy.evaluation_s, 3),
            gpu_busy_fraction=busy.busy_fraction,
            timing_fraction=busy.timing_fraction,
        )
    status = live.run_status if live else None
    if status is not None:
        fields.update(
            status=status.status,
            iteration=max(run.iteration, status.iteration),
            goal=asdict(status.goal),
            best_speedup=status.best_speedup if status.best_speedup is not None else run.best_speedup,
            best_roofline=status.best_roofline,
            distance=status.distance,
            budget_used=status.budget_used,
            phase=status.phase,
            stop_reason=status.stop_reason or run.stop_reason,
            live=True,
            candidates=live_candidates(live),
            candidates_iteration=status.candidates_iteration,
            start_iteration=status.start_iteration,
        )
    if live is not None:
        fields["waiting_for_worker"] = waiting_line(live)
        ended = ended_verdict(run, live)
        if ended is not None:
            fields.update(status=ended[0], stop_reason=ended[1])
    # A running run's note on its failing proposer is not a reason it stopped: it has its own field.
    fields["proposer_failing"] = proposer_failing(run, live) if fields["status"] not in FINISHED_RUN_STATUSES else ""
    if (fields.get("stop_reason") or "").startswith(FAILING_PREFIX):
        fields["stop_reason"] = ""
    return RunPublic(**fields)


MAX_RUN_ID = 200


def plausible_run_id(run_id: str) -> bool:
    """Ids no run can have (NUL bytes, which PostgreSQL text refuses; absurd lengths) are simply unknown."""
    return 0 < len(run_id) <= MAX_RUN_ID and "\x00" not in run_id


def load_run(url: str, run_id: str) -> Run:
    if not plausible_run_id(run_id):
        raise RunNotFound(run_id)
    with session_scope(url, read_only=True) as session:
        run = repository.get_run(session, run_id)
        if run is None:
            raise RunNotFound(run_id)
        return run


def best_baseline(url: str, attempt_id: Optional[int]) -> str:
    """The baseline the run's best was timed against (its judge report's ``baseline``); "" if unknown."""
    if attempt_id is None:
        return ""
    with session_scope(url, read_only=True) as session:
        attempt = repository.get_attempt(session, attempt_id)
        if attempt is None or not attempt.report_sha:
            return ""
        try:
            report = json.loads(get_text(session, attempt.report_sha))
        except (KeyError, ValueError):
            return ""
    return str(report.get("baseline") or "") if isinstance(report, dict) else ""


def load_busy(url: str, run_id: str) -> RunBusy:
    """The run's GPU figures from its attempts (``store/busy.py``)."""
    with session_scope(url, read_only=True) as session:
        return run_fractions(repository.busy_rows(session, run_id))


def ended_verdict(run: Run, live: LiveState, now: Optional[datetime] = None) -> Optional[tuple[str, str]]:
    """(status, stop reason) for a row the store calls live whose workflow is gone or closed
    without recording its end; None while the workflow runs (its own records are the word), when
    Temporal could not say, and for rows already finished.

    GET routes show this verdict without writing it; the reconciler (api/reconciler.py) writes it."""
    if run.status in FINISHED_RUN_STATUSES:
        return None
    if not live.found:
        if (now or datetime.now(timezone.utc)) - _aware(run.created_at) < ORPHAN_GRACE:
            return None  # the start may still be on its way
        return "failed", NEVER_STARTED
    if live.run_status is None and live.status in FINISHED_RUN_STATUSES:
        return live.status, live.stop_reason or ""
    return None


# The public attempt's fields that are the store's columns as they are (the rest are derived below):
# one list, read from both classes, so a column added to both is shown without a third copy.
STORED_ATTEMPT_FIELDS = tuple(
    name for name in AttemptPublic.model_fields if name in Attempt.__table__.columns and name != "created_at"
)


def attempt_public(attempt: Attempt) -> AttemptPublic:
    busy_fraction, timing_fraction = attempt_fractions(
        attempt.wall_s, attempt.wall_share_s, attempt.gpu_busy_s, attempt.timing_s
    )
    stored = {name: getattr(attempt, name) for name in STORED_ATTEMPT_FIELDS}
    return AttemptPublic(
        **stored,
        llm_url=llm_url(attempt),
        gpu_busy_fraction=busy_fraction,
        timing_fraction=timing_fraction,
        created_at=_aware(attempt.created_at),
    )
