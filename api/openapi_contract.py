"""The parts of the OpenAPI schema FastAPI cannot write from the routes alone.

- ``RunCreate.problem`` lists the problems accepted now: the built-in ones and those CPU workers
  registered (problems are registered at run time, so the list is read when the schema is).
- Every route that takes a ``run_id`` is linked from the 201 of POST /runs and of POST
  /runs/{run_id}/continue (``$response.body#/id``): clients, and a stateful fuzzer, can follow
  a created run to the routes that read and steer it.
"""

from __future__ import annotations

import copy
import time
from typing import Any, Callable

from fastapi import FastAPI
from sqlalchemy.exc import SQLAlchemyError

from kernels.registry import builtin_problem_names
from store import repository
from store.db import session_scope

# How long a read of the registered problems serves /openapi.json (it is read on the event loop).
PROBLEMS_TTL_S = 5.0
CREATING = (("/runs", "post"), ("/runs/{run_id}/continue", "post"))


def accepted_problems(database_url: str) -> list[str]:
    """Built-in problems, then registered ones; the built-in ones alone when the store cannot say."""
    names = list(builtin_problem_names())
    try:
        with session_scope(database_url, read_only=True) as session:
            rows = repository.list_registered_problems(session)
            names += [row.name for row in rows if row.name not in names]
    except SQLAlchemyError:
        pass
    return names


def _run_links(schema: dict[str, Any]) -> dict[str, Any]:
    links = {}
    for path, methods in schema.get("paths", {}).items():
        if not path.startswith("/runs/{run_id}"):
            continue
        for operation in methods.values():
            params = [p for p in operation.get("parameters", []) if p.get("in") == "path"]
            if [p["name"] for p in params] == ["run_id"] and "operationId" in operation:
                links[operation["operationId"]] = {
                    "operationId": operation["operationId"],
                    "parameters": {"run_id": "$response.body#/id"},
                    "description": f"{operation.get('summary', path)} for the run just created",
                }
    return links


# What a route refuses with 422 beyond what the schema expresses (FastAPI writes "Validation Error"):
# checks against the store or the run, which a body valid by the schema can still fail.
_BEYOND_SCHEMA = "text that cannot be stored (a lone surrogate, a NUL)"
REFUSALS_422 = {
    ("/runs", "post"): "The body breaks the schema, or a check the schema cannot express: a problem that is not "
    "served now, an unknown from_run or one on another problem, a goal, budget or proposer the run would refuse, "
    + _BEYOND_SCHEMA,
    ("/runs/{run_id}/continue", "post"): "The body breaks the schema, or the budget counted with the parent's "
    "is past its limits, or " + _BEYOND_SCHEMA,
    ("/runs/{run_id}/goal", "patch"): "The body breaks the schema, or the goal merged with the run's is invalid "
    "(a roofline target over 1), or the run refused it (its objective cannot change mid-run), or "
    + _BEYOND_SCHEMA,
    ("/runs/{run_id}/hints", "post"): "The body breaks the schema, or the hint sets a knob the problem lacks or "
    "a value the knob does not take (GET /problems lists them), or " + _BEYOND_SCHEMA,
}


def _with_links(schema: dict[str, Any]) -> dict[str, Any]:
    for (path, method), description in REFUSALS_422.items():
        refused = schema.get("paths", {}).get(path, {}).get(method, {}).get("responses", {}).get("422")
        if refused is not None:
            refused["description"] = description
    links = _run_links(schema)
    for path, method in CREATING:
        response = schema.get("paths", {}).get(path, {}).get(method, {}).get("responses", {}).get("201")
        if response is not None:
            response["links"] = links
    return schema


def install(app: FastAPI, database_url: str, *, list_problems: bool = True) -> None:
    """Replace ``app.openapi`` with one that adds the above. ``list_problems`` is False where the
    API also takes object paths as problems (tests), which no enum can list."""
    generate: Callable[[], dict[str, Any]] = app.openapi
    cached: dict[str, Any] = {}

    def openapi() -> dict[str, Any]:
        if "base" not in cached:
            cached["base"] = _with_links(copy.deepcopy(generate()))
        if not list_problems:
            return cached["base"]
        now = time.monotonic()
        if now - cached.get("at", -PROBLEMS_TTL_S) >= PROBLEMS_TTL_S:
            schema = copy.deepcopy(cached["base"])
            problem = schema["components"]["schemas"]["RunCreate"]["properties"]["problem"]
            problem["enum"] = accepted_problems(database_url)
            cached["schema"], cached["at"] = schema, now
        return cached["schema"]

    app.openapi = openapi  # type: ignore[method-assign]
