"""Error bodies: malformed JSON says where it broke; validation errors keep FastAPI's list form."""

from __future__ import annotations

import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.temporal import TemporalUnavailable


def _describe(error: dict) -> dict:
    if error.get("type") == "json_invalid":
        reason = (error.get("ctx") or {}).get("error", "")
        where = error.get("loc", [None, None])[-1]
        error = {**error, "msg": f"malformed JSON body: {reason} (at character {where})"}
    error.pop("url", None)
    return error


def _finite(value: Any) -> Any:
    """JSON has no NaN or Infinity (Python's parser accepts them): echo such inputs as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


async def validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = jsonable_encoder([_describe(dict(e)) for e in exc.errors()])
    return JSONResponse(status_code=422, content={"detail": _finite(errors)})


async def temporal_unavailable(_request: Request, exc: TemporalUnavailable) -> JSONResponse:
    return JSONResponse(status_code=503, content={"detail": str(exc)})


async def http_error(request: Request, exc: StarletteHTTPException):
    """Starlette's 405 names only the first route that matched the path; name every method."""
    if exc.status_code != 405:
        return await http_exception_handler(request, exc)
    methods: set[str] = set()
    pending = list(request.app.router.routes)
    while pending:
        route = pending.pop()
        included = getattr(route, "original_router", None)
        if included is not None:
            pending.extend(included.routes)
            continue
        regex, allowed = getattr(route, "path_regex", None), getattr(route, "methods", None)
        if regex is not None and allowed and regex.match(request.url.path):
            methods |= set(allowed)
    return JSONResponse({"detail": exc.detail}, status_code=405, headers={"Allow": ", ".join(sorted(methods))})


def install(app: FastAPI) -> None:
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(TemporalUnavailable, temporal_unavailable)


def invalid(location: list[str | int], message: str, value: object = None) -> dict:
    """One validation error in FastAPI's shape, for checks the schema cannot express."""
    return {"type": "value_error", "loc": location, "msg": message, "input": value}
