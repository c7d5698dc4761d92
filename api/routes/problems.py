"""/problems: what can be optimized, with shapes and roofline inputs."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from api.deps import AuthDep
from api.schemas import KnobPublic, Message, ProblemPublic, ProblemsPublic
from kernels.problem import Problem
from kernels.roofline import work
from kernels.registry import get_problem, problem_names

router = APIRouter(prefix="/problems", tags=["problems"], dependencies=[AuthDep], responses={401: {"model": Message}})


def problem_knobs(problem: Problem) -> list[KnobPublic]:
    """The problem's search space: knob, allowed values, default, what it does."""
    space = problem.load_space()
    descriptions = getattr(space, "KNOBS", {})
    return [
        KnobPublic(name=name, values=list(values), default=space.DEFAULT.get(name), description=descriptions.get(name, ""))
        for name, values in space.SPACE.items()
    ]


def problem_public(problem: Problem) -> ProblemPublic:
    bench = []
    for shape in problem.shapes.get("bench", ()):
        flops, nbytes = work(problem, shape, problem.gpu_dtype)
        bench.append({"shape": list(shape), "label": problem.describe_shape(shape), "flops": flops, "bytes": nbytes})
    return ProblemPublic(
        **problem.public(),
        baselines=problem.baselines,
        gpu_dtype=problem.gpu_dtype,
        bench=bench,
        knobs=problem_knobs(problem),
    )


def _all_problems() -> list[ProblemPublic]:
    return [problem_public(get_problem(name)) for name in problem_names()]


@router.get("", response_model=ProblemsPublic)
async def read_problems() -> ProblemsPublic:
    problems = await run_in_threadpool(_all_problems)
    return ProblemsPublic(data=problems, count=len(problems))
