"""The run page (HTML for people) and the token form that lets a browser open it."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Optional
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api import runs_service as service
from api.deps import INVALID_TOKEN, PAGE_AUTH, TOKEN_COOKIE, page_token_state, token_is_valid
from api.page import (
    CONTENT_SECURITY_POLICY,
    NotebookView,
    PageData,
    render_login_page,
    render_message_page,
    render_run_page,
)
from api.page_plot import PlotPoint
from api.page_values import baseline_name, shape_times
from api.temporal import TemporalUnavailable
from api.text_safety import clean_text
from kernels.registry import get_problem
from api.progress import gpu_line, percent, progress_details
from store import repository
from store.artifacts import get_text
from store.busy import attempt_fractions, run_fractions
from store.db import session_scope
from workflows.types import FINISHED_RUN_STATUSES, Goal, Notebook

router = APIRouter(tags=["pages"])

NOTEBOOK_ROWS = 200
REFRESH_S = 10
LOGIN_HINT = "This page needs the API token that `marathon up` printed."
STALE_TOKEN_HINT = (
    "The API token this browser sent is not accepted (invalid API token): paste the current one, "
    "which `marathon up` printed and wrote to <home>/api-token."
)
EMPTY_FORM_HINT = "No token was given: paste the API token that `marathon up` printed."
MAX_FORM_BYTES = 8192


def html_response(body: str, status_code: int = 200) -> HTMLResponse:
    """The page as UTF-8 whatever its rows hold (a lone surrogate becomes U+FFFD, api/text_safety.py)."""
    return HTMLResponse(
        clean_text(body),
        status_code=status_code,
        headers={"Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Content-Type-Options": "nosniff"},
    )


@lru_cache(maxsize=32)
def _seed_source(problem: str) -> tuple[Optional[str], str]:
    try:
        return get_problem(problem).seed_source(), ""
    except Exception as error:
        return None, f"The seed kernel could not be rendered: {error}"


def _report(session, sha: Optional[str]) -> Any:
    """A stored judge report as a dict; None when it is missing or not JSON."""
    if not sha:
        return None
    try:
        return json.loads(get_text(session, sha))
    except (KeyError, ValueError):
        return None


def _agent_steps(session, sha: Optional[str]) -> list[str]:
    """An agent-written attempt's steps, one short line each (empty for other attempts)."""
    transcript = _report(session, sha)
    if not isinstance(transcript, dict) or not transcript.get("agent"):
        return []
    return [
        f"{step.get('kind')} {step.get('name')}" + (f"({step['arguments']})" if step.get("arguments") else "")
        + ("" if step.get("ok", True) else " failed") + f": {step.get('summary', '')} ({step.get('seconds', 0)} s)"
        for step in transcript.get("steps") or []
    ]


def _store_view(url: str, run_id: str) -> dict:
    if not service.plausible_run_id(run_id):
        raise service.RunNotFound(run_id)
    with session_scope(url, read_only=True) as session:
        run = repository.get_run(session, run_id)
        if run is None:
            raise service.RunNotFound(run_id)
        points = [
            PlotPoint(iteration, index, status, speedup, is_best=is_best, not_confirmed=not_confirmed)
            for iteration, index, status, speedup, is_best, not_confirmed in repository.attempt_series(session, run_id)
        ]
        rows, baseline = [], ""
        for a in repository.recent_attempts(session, run_id, limit=NOTEBOOK_ROWS):
            report = _report(session, a.report_sha)
            baseline = baseline or baseline_name(report)
            rows.append(
                {
                    "iteration": a.iteration,
                    "index": a.index,
                    "strategy": a.strategy,
                    "status": a.status,
                    "speedup": a.speedup,
                    "note": a.message,
                    "is_best": a.id == run.best_attempt_id,
                    "not_confirmed": (a.message or "").startswith("not confirmed"),
                    "times": shape_times(report),
                    "llm_url": service.llm_url(a),
                    "agent_steps": _agent_steps(session, a.llm_sha),
                    "gpu": _gpu_cell(a),
                }
            )
        # The plot's hover text gets the absolute times of the attempts the table shows.
        times = {(row["iteration"], row["index"]): row["times"] for row in rows}
        for point in points:
            point.times = times.get((point.iteration, point.index), [])
        best_source, best_label, best_times = None, "", []
        best = repository.get_attempt(session, run.best_attempt_id) if run.best_attempt_id else None
        if best is not None:
            try:
                best_source = get_text(session, best.source_sha)
            except KeyError:
                best_source = None
            speed = "" if best.speedup is None else f", {best.speedup:.3f}x ({best.timing_kind} timing)"
            best_label = f"Iteration {best.iteration}, candidate {best.index}: {best.strategy}{speed}"
            best_report = _report(session, best.report_sha)
            best_times = shape_times(best_report)
            baseline = baseline_name(best_report) or baseline
        events, _ = repository.list_steering(session, run_id, limit=NOTEBOOK_ROWS)
        steering = [(e.created_at.strftime("%Y-%m-%d %H:%M:%S UTC"), _steering_text(e.kind, e.detail or {}))
                    for e in events]
        return {
            "run": run,
            "busy": run_fractions(repository.busy_rows(session, run_id)),
            "points": points,
            "rows": rows,
            "steering": steering,
            "best_source": best_source,
            "best_label": best_label,
            "best_times": best_times,
            "baseline": baseline,
            "timing_kind": best.timing_kind if best is not None else "",
        }


def _gpu_cell(attempt) -> str:
    """``62% / 18%``: the GPU busy and timing fractions of one attempt; "—" where unmeasured."""
    busy, timing = attempt_fractions(attempt.wall_s, attempt.wall_share_s, attempt.gpu_busy_s, attempt.timing_s)
    return "—" if busy is None and timing is None else f"{percent(busy)} / {percent(timing)}"


def _steering_text(kind: str, detail: dict) -> str:
    """One steering event in words: "hint: chunk=64 (read by search)", "goal: 2.0 -> 3.0", "pause"."""
    if kind == "hint":
        reader = detail.get("read_by")
        return f"hint: {detail.get('hint', '')}" + (f" (read by the {reader} proposer)" if reader else "")
    if kind == "goal":
        before, after = detail.get("previous") or {}, detail.get("goal") or {}
        return f"goal: {before.get('target', '?')} -> {after.get('target', '?')} ({after.get('objective', 'speedup')})"
    return kind


async def _workflow_notebook(request: Request, run_id: str) -> Optional[Notebook]:
    try:
        return await request.app.state.temporal.query(run_id, "notebook", Notebook)
    except (TemporalUnavailable, Exception):
        # Finished runs whose worker is gone, or a workflow without that query: the store's rows remain.
        return None


_HTML = {"text/html": {"schema": {"type": "string"}}}
PAGE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": _HTML, "description": "The run page"},
    401: {"content": _HTML, "description": "No token, or one not accepted: a page with the token form"},
    404: {"content": _HTML, "description": "Unknown run: a page that says so"},
}


@router.get(
    "/runs/{run_id}/page",
    response_class=HTMLResponse,
    include_in_schema=True,
    dependencies=PAGE_AUTH,
    responses=PAGE_RESPONSES,
)
async def read_run_page(run_id: str, request: Request) -> Response:
    """The run page: summary, speedup curve, steering and notebook, the diff against the seed, the kernel."""
    state = await page_token_state(request)
    if state != "ok":
        hint = LOGIN_HINT if state == "missing" else STALE_TOKEN_HINT
        return html_response(render_login_page(request.url.path, hint), 401)
    settings = request.app.state.settings
    temporal = request.app.state.temporal
    url = settings.resolved_database_url
    try:
        view = await run_in_threadpool(_store_view, url, run_id)
    except service.RunNotFound as error:
        return html_response(render_message_page("Not found", str(error)), 404)
    run = view["run"]
    # Nothing is written here: the live state is laid over the store's row for this page only.
    live = await temporal.live_state(run_id) if run.status not in FINISHED_RUN_STATUSES else None
    public = service.to_public(run, settings, temporal.ui_url(run_id), live, view["busy"])
    notebook = NotebookView(rows=view["rows"], steering=view["steering"])
    workflow_notebook = await _workflow_notebook(request, run_id) if live and live.run_status else None
    if workflow_notebook is not None:
        notebook.lessons = workflow_notebook.lessons
        notebook.hints = workflow_notebook.hints
        notebook.failed_strategies = workflow_notebook.failed_strategies
    goal = Goal(**public.goal)
    seed_source, seed_note = (None, "")
    if view["best_source"] is not None:
        seed_source, seed_note = await run_in_threadpool(_seed_source, run.problem)
    data = PageData(
        run_id=run_id,
        problem=public.problem,
        status=public.status,
        iteration=public.iteration,
        goal_text=goal.describe(),
        goal_target=goal.target if goal.objective == "speedup" else None,
        best_speedup=public.best_speedup,
        stop_reason=public.stop_reason,
        phase=public.phase,
        temporal_url=public.temporal_url,
        api_url=f"/runs/{run_id}",
        points=view["points"],
        best_source=view["best_source"],
        best_label=view["best_label"],
        seed_source=seed_source,
        seed_note=seed_note,
        notebook=notebook,
        refresh_s=None if public.status in FINISHED_RUN_STATUSES else REFRESH_S,
        best_times=view["best_times"],
        progress=progress_details(public.model_dump(mode="json")),
        from_run=public.from_run,
        from_kind=public.from_kind,
        gpu=gpu_line(public.model_dump(mode="json")),
        baseline=view["baseline"],
        timing_kind=view["timing_kind"] or "",
    )
    return html_response(render_run_page(data))


def _safe_next(path: str) -> str:
    """Only this site's run pages: a login form must not become an open redirect."""
    if path.startswith("/runs/") and path.endswith("/page") and "//" not in path and "\\" not in path:
        return path
    return "/docs"


@router.post("/login", response_class=HTMLResponse, include_in_schema=False)
async def login(request: Request) -> Response:
    """Exchange the token typed into the run page's form for an HttpOnly cookie."""
    raw = await request.body()
    form = parse_qs(raw[:MAX_FORM_BYTES].decode("utf-8", errors="replace"))
    token = (form.get("token") or [""])[0].strip()
    next_path = _safe_next((form.get("next") or [""])[0])
    if not token:
        return html_response(render_login_page(next_path, EMPTY_FORM_HINT), 401)
    if not await run_in_threadpool(token_is_valid, request.app.state.settings, token):
        return html_response(render_login_page(next_path, INVALID_TOKEN), 401)
    response = RedirectResponse(next_path, status_code=303)
    response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict", path="/")
    return response
