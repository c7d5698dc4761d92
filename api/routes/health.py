"""/healthz: liveness without auth, for supervisors and load balancers."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import text

from api.deps import SettingsDep, TemporalDep
from api.schemas import Health
from store.db import session_scope

router = APIRouter(tags=["health"])


def _database_state(url: str) -> str:
    try:
        with session_scope(url, read_only=True) as session:
            session.execute(text("SELECT 1"))
    except Exception as error:
        return f"unreachable: {type(error).__name__}"
    return "ok"


@router.get("/healthz", response_model=Health)
async def read_health(settings: SettingsDep, temporal: TemporalDep) -> Health:
    """200 while the API serves; the body says whether the database and Temporal answer, which
    task queues have a worker polling, and ``ready`` once runs can start and be served."""
    database = await run_in_threadpool(_database_state, settings.resolved_database_url)
    temporal_state = await temporal.check()
    workers, missing = await temporal.workers() if temporal_state == "ok" else ({}, [f"Temporal {temporal_state}"])
    if database != "ok":
        missing.insert(0, f"the database is {database}")
    return Health(
        status="ok",
        database=database,
        temporal=temporal_state,
        ready=not missing,
        workers=workers,
        not_ready=missing,
    )
