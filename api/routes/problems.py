"""/problems: what can be optimized, with shapes and roofline inputs."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from api.deps import AuthDep, SettingsDep
from api.problem_catalog import known_problems
from api.runs_service import aware
from api.problem_schemas import ProblemPublic, ProblemsPublic
from api.schemas import Message

router = APIRouter(prefix="/problems", tags=["problems"], dependencies=[AuthDep], responses={401: {"model": Message}})


def _all_problems(database_url: str) -> list[ProblemPublic]:
    return [
        ProblemPublic(
            **known.description,
            registered_by=known.worker,
            registered_at=aware(known.registered_at) if known.registered_at else None,
        )
        for known in known_problems(database_url)
    ]


@router.get("", response_model=ProblemsPublic)
async def read_problems(settings: SettingsDep) -> ProblemsPublic:
    """The built-in problems, then each problem a CPU worker registered when it started (a problem
    from a package of your own appears here once a worker that has the package has started)."""
    problems = await run_in_threadpool(_all_problems, settings.resolved_database_url)
    return ProblemsPublic(data=problems, count=len(problems))
