"""Error bodies: malformed JSON says where it broke; validation errors keep FastAPI's list form."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.error_echo import MAX_ERRORS, bounded_error, more_errors
from api.temporal import TemporalUnavailable


def _describe(error: dict) -> dict:
    if error.get("type") == "json_invalid":
        reason = (error.get("ctx") or {}).get("error", "")
        where = error.get("loc", [None, None])[-1]
        error = {**error, "msg": f"malformed JSON body: {reason} (at character {where})"}
    error.pop("url", None)
    return error


async def validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    listed = [bounded_error(_describe(dict(e))) for e in errors[:MAX_ERRORS]]
    if len(errors) > MAX_ERRORS:
        listed.append(more_errors(len(errors) - MAX_ERRORS))
    return JSONResponse(status_code=422, content={"detail": listed})


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
