"""The FastAPI application: ``create_app()`` is what uvicorn serves (``api.main:create_app --factory``)."""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import asynccontextmanager
from typing import Optional

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool

from api import errors, openapi_contract
from api.body_encoding import Utf8JsonBody
from api.limits import BodySizeLimit
from api.reconciler import keep_reconciling
from api.routes import docs, health, lineage, llm_exchange, pages, problems, runs, steering
from api.temporal import ClientFactory, TemporalGateway
from marathon.settings import Settings, get_settings
from store.db import upgrade


def create_app(
    settings: Optional[Settings] = None,
    temporal_client_factory: Optional[ClientFactory] = None,
    *,
    allow_problem_paths: bool = False,
) -> FastAPI:
    """Build the API.

    ``temporal_client_factory`` returns a connected ``temporalio.client.Client`` (tests pass the
    dev server's); by default the settings' address is dialled on first use.
    ``allow_problem_paths`` lets POST /runs name toy problems as ``"package.module:OBJ"``
    (tests only: it imports whatever module the request names).
    """
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        url = settings.resolved_database_url
        await run_in_threadpool(upgrade, url)
        # Reads never write: rows whose workflow is gone are ended by this task alone.
        reconciler = None
        if settings.reconcile_every_s > 0:
            reconciler = asyncio.create_task(keep_reconciling(url, app.state.temporal, settings.reconcile_every_s))
        yield
        if reconciler is not None:
            reconciler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reconciler

    app = FastAPI(
        title="Marathon",
        summary="Optimize GPU kernels over long horizons, durably (Temporal underneath).",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # served by api/routes/docs.py without a CDN
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.temporal = TemporalGateway(settings, temporal_client_factory)
    app.state.allow_problem_paths = allow_problem_paths
    errors.install(app)
    app.add_middleware(Utf8JsonBody)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.include_router(health.router)
    app.include_router(problems.router)
    app.include_router(runs.router)
    app.include_router(steering.router)
    app.include_router(lineage.router)
    app.include_router(llm_exchange.router)
    app.include_router(pages.router)
    docs.install(app)
    openapi_contract.install(app, settings.resolved_database_url, list_problems=not allow_problem_paths)
    return app
