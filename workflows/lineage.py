"""Runs that continue or fork another run: how the parent's champion and notebook seed the child.

The child is a new run (its own workflow, its own bounded history) linked to its parent. It
starts with the parent's notebook and, for a continuation, the parent's iteration count; the
parent's champion is *inherited*, not trusted: the child's first iteration evaluates it next to
the proposals on the child's own evaluation worker (the device may differ), and it becomes the
child's best only through the normal challenger choice and paired confirmation.

Pure and deterministic, like ``workflows.notebook``: the workflow calls it directly.
"""

from __future__ import annotations

import copy
from typing import Optional

from workflows.types import START_KINDS, BestKernel, Candidate, RunState, StartFrom

INHERITED_PREFIX = "inherited champion of run"
STRATEGY_LIMIT = 400


def start_problems(start: Optional[StartFrom]) -> list[str]:
    """Why ``start`` cannot seed a run; empty when it can (or when there is none)."""
    if start is None:
        return []
    errors = []
    if not start.run_id:
        errors.append("start_from.run_id must name the parent run")
    if start.kind not in START_KINDS:
        errors.append(f"start_from.kind must be one of {', '.join(START_KINDS)}, got {start.kind!r}")
    if start.iteration < 0:
        errors.append(f"start_from.iteration must be >= 0, got {start.iteration}")
    if start.champion is not None and not start.champion.source_sha:
        errors.append("start_from.champion needs the source_sha of the parent's best kernel")
    return errors


def seed_state(state: RunState, start: Optional[StartFrom]) -> None:
    """On a run's first segment: take the parent's notebook, mark its champion as inherited and,
    for a continuation, go on from the parent's iteration count (mutates ``state``). The child's
    own budgets of hours, GPU seconds and tokens start from zero."""
    if start is None:
        return
    state.notebook = copy.deepcopy(start.notebook)
    state.inherited = copy.deepcopy(start.champion)
    if start.kind == "continue":
        state.iteration = start.iteration
        state.last_improvement_iteration = start.iteration


def proposal_base(state: RunState) -> Optional[BestKernel]:
    """The kernel proposals start from: the run's best, else the champion it inherited."""
    return state.best if state.best is not None else state.inherited


def with_inherited(state: RunState, start: Optional[StartFrom], candidates: list[Candidate]) -> list[Candidate]:
    """The proposals plus, while the inherited champion is unjudged here, the champion itself as
    one more candidate (after the proposals' indices), so this run measures it like any other."""
    champion = state.inherited
    if champion is None:
        return candidates
    parent = start.run_id if start is not None else "?"
    score = f"{champion.speedup:.3g}x there" if champion.speedup is not None else "no score there"
    strategy = f"{INHERITED_PREFIX} {parent} ({score}, re-judged here): {champion.strategy}"[:STRATEGY_LIMIT]
    index = max((c.index for c in candidates), default=-1) + 1
    extra = Candidate(
        index=index,
        source_sha=champion.source_sha,
        strategy=strategy,
        knobs=copy.deepcopy(champion.knobs),
    )
    return [*candidates, extra]
