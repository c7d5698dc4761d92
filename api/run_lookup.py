"""What every /runs route shares: the error answers they document, and finding a run (or one of its
texts) in the store, with a 404 that names what is missing."""

from __future__ import annotations

from typing import Annotated, Optional

from fastapi import HTTPException, Query, status
from fastapi.concurrency import run_in_threadpool

from api import runs_service as service
from api.schemas import Message
from store import repository
from store.artifacts import get_text

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

# The paging of a run's attempts and steering log (the store refuses more than 1000 rows a page).
PageOffset = Annotated[int, Query(ge=0, le=10_000_000)]
PageLimit = Annotated[int, Query(ge=1, le=1000)]


def _not_found(error: service.RunNotFound) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, str(error))


async def load_run(settings, run_id: str):
    """The run's row (read in a thread); 404 when the store has no run ``run_id``."""
    try:
        return await run_in_threadpool(service.load_run, settings.resolved_database_url, run_id)
    except service.RunNotFound as error:
        raise _not_found(error) from None


def existing_run(session, run_id: str):
    """The run's row in ``session``; 404 when there is none (an implausible id is not looked up)."""
    run = repository.get_run(session, run_id) if service.plausible_run_id(run_id) else None
    if run is None:
        raise _not_found(service.RunNotFound(run_id))
    return run


def text_or_none(session, sha: Optional[str]) -> Optional[str]:
    """The artifact ``sha`` as text; None when no sha is given or the store lacks it."""
    try:
        return get_text(session, sha) if sha else None
    except KeyError:
        return None
