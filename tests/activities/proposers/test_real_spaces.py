"""The search proposer and the LLM prompt on the real problems' spaces (kda, mla-decode):
proposals are new, validate, and render to Python sources that define kernel(...), import no
forbidden library and pass the judge's static policy."""

from __future__ import annotations

import ast
import hashlib
import importlib
import math
import random

import pytest

from activities.proposers.base import PastAttempt
from kernels.knob_space import KnobSpace
from activities.proposers.prompt import FORBIDDEN_LIBRARIES, build_messages
from activities.proposers.search import choose_points, generator_for
from kernels.registry import get_problem
from workflows.types import Goal, Notebook, ProposeInput, ProposerConfig

PROBLEMS = ["kda", "kda-varlen", "mla-decode", "mla-decode-paged"]


def load_space(name):
    problem = get_problem(name)
    try:
        module = importlib.import_module(problem.space)
    except ModuleNotFoundError as missing:
        if missing.name == problem.space:
            pytest.skip(f"{name}'s space module {problem.space} has not landed yet")
        raise
    return problem, KnobSpace(module)


def synthetic_speedup(space, point, weights):
    """A smooth made-up objective over the knob indices; None (failure) on a tenth of points."""
    if hashlib.sha256(repr(space.key(point)).encode()).digest()[0] % 10 == 0:
        return None
    return math.exp(sum(w * space.space[k].index(point[k]) / len(space.space[k]) for k, w in weights.items()))


def policy_findings(source):
    from kernels.judge.policy import scan

    return [finding.render() for finding in scan(source)]


def imported_modules(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module.split(".")[0]


@pytest.mark.parametrize("name", PROBLEMS)
def test_the_default_is_valid_and_renders_the_seed(name):
    problem, space = load_space(name)
    assert space.problems(space.default) == []
    assert problem.seed_source() == space.render(space.default)


@pytest.mark.parametrize("name", PROBLEMS)
def test_search_proposals_on_the_real_space_validate_and_render(name):
    problem, space = load_space(name)
    weights = {k: random.Random(k).uniform(-1, 1) for k in space.knobs}
    history, seen = [], set()
    for iteration in range(6):
        chosen = choose_points(space, history, 4, generator_for(name, 0, iteration))
        assert len(chosen) == 4
        for index, (point, _) in enumerate(chosen):
            key = space.key(point)
            assert key not in seen
            seen.add(key)
            assert space.problems(point) == [], point
            source = space.render(point)
            tree = ast.parse(source)
            assert "kernel" in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
            assert not set(imported_modules(tree)) & set(FORBIDDEN_LIBRARIES)
            assert policy_findings(source) == [], space.describe(point)
            speedup = synthetic_speedup(space, point, weights)
            status = "ok" if speedup is not None else "compile_error"
            history.append(PastAttempt(iteration, index, space.describe(point), dict(point), status, speedup))
    assert history[0].knobs == space.default


@pytest.mark.parametrize("name", PROBLEMS)
def test_the_llm_prompt_describes_the_real_problem(name):
    problem, space = load_space(name)
    request = ProposeInput(
        run_id="r", problem=name, goal=Goal(target=1.5), iteration=0, count=1,
        proposer=ProposerConfig(kind="llm"), notebook=Notebook(),
    )
    [system, user] = build_messages(request, problem, problem.seed_source())
    assert system["content"].startswith("# Goal\nReach 1.5x")
    text = user["content"]
    assert f"keyword arguments: {', '.join(problem.input_names)}" in text
    assert problem.describe_shape(problem.shape_set("bench")[0]) in text
    assert problem.seed_source().strip() in text
