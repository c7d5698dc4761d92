"""A problem's public description: what ``GET /problems`` shows and what a worker registers.

JSON-ready data only (names, shapes, tolerances, knobs, the roofline's flops and bytes per bench
shape), so the API can show a problem whose package it has not installed.
"""

from __future__ import annotations

from typing import Any

from kernels.problem import Problem
from kernels.roofline import work


def knobs(problem: Problem) -> list[dict[str, Any]]:
    """The problem's search space: knob, allowed values, default, what it does."""
    space = problem.load_space()
    descriptions = getattr(space, "KNOBS", {})
    return [
        {"name": name, "values": list(values), "default": space.DEFAULT.get(name),
         "description": descriptions.get(name, "")}
        for name, values in space.SPACE.items()
    ]


def describe(problem: Problem) -> dict[str, Any]:
    bench = []
    for shape in problem.shapes.get("bench", ()):
        flops, nbytes = work(problem, shape, problem.gpu_dtype)
        bench.append({"shape": list(shape), "label": problem.describe_shape(shape), "flops": flops, "bytes": nbytes})
    return {**problem.public(), "baselines": problem.baselines, "gpu_dtype": problem.gpu_dtype, "bench": bench,
            "knobs": knobs(problem)}
