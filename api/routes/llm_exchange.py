"""/runs/{id}/attempts/{attempt_id}/llm: what the LLM was asked and answered for one attempt."""

from __future__ import annotations

import json
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Path, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from api import run_lookup
from api import runs_service as service
from api.deps import INVALID_TOKEN, MISSING_TOKEN, PAGE_AUTH, page_token_state
from api.schemas import (
    LLMExchange,
)
from store import repository
from store.db import session_scope

# The LLM exchange is linked from the run page, which a browser opens with the token cookie
# rather than a header: this route takes either.
router = APIRouter(prefix="/runs", tags=["runs"], responses=run_lookup.ERRORS, dependencies=PAGE_AUTH)

# Attempt ids are the store's integer keys; past 2**53 a JavaScript client could not even write
# one, and no store gets there: a larger number is a bad request (422).
ATTEMPT_ID_MAX = 2**53 - 1


def _llm_exchange(url: str, run_id: str, attempt_id: int) -> LLMExchange:
    with session_scope(url, read_only=True) as session:
        attempt = repository.get_attempt(session, attempt_id) if service.plausible_run_id(run_id) else None
        if attempt is None or attempt.run_id != run_id:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"run {run_id} has no attempt {attempt_id}")
        if not attempt.llm_sha:
            raise HTTPException(
                status.HTTP_404_NOT_FOUND, f"attempt {attempt_id} of run {run_id} was not written by an LLM"
            )
        text = run_lookup.text_or_none(session, attempt.llm_sha)
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
    lines += _agent_lines(transcript)
    for message in transcript.get("messages", []):
        lines += ["", f"===== {message.get('role', '?')} =====", str(message.get("content", ""))]
        lines += [f"-> tool call {c.get('name')}({c.get('arguments')})" for c in message.get("tool_calls") or []]
    lines += ["", "===== reply =====", str(transcript.get("reply", ""))]
    return "\n".join(lines) + "\n"


def _agent_lines(transcript: dict) -> list[str]:
    """An agent's steps, one line each (kind, tool, arguments, result summary, seconds), and its use."""
    if not transcript.get("agent"):
        return []
    usage = transcript.get("usage") or {}
    lines = ["", "===== agent steps =====",
             f"{usage.get('model_calls', 0)} model calls, {usage.get('tool_calls', 0)} tool calls, "
             f"{usage.get('tokens', 0)} tokens, {usage.get('wall_s', 0)} s wall"
             + (f", ${usage['usd']:.4f}" if usage.get("usd") else "")]
    if transcript.get("error"):
        lines.append(f"no candidate: {transcript['error']}")
    for number, step in enumerate(transcript.get("steps") or [], start=1):
        mark = "" if step.get("ok", True) else " [failed]"
        arguments = f"({step['arguments']})" if step.get("arguments") else ""
        tokens = f", {step['tokens']} tokens" if step.get("tokens") else ""
        lines.append(f"{number:3}. {step.get('kind')} {step.get('name')}{arguments}{mark}: {step.get('summary', '')} "
                     f"[{step.get('seconds', 0)} s{tokens}]")
    return lines


@router.get(
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
