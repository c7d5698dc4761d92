"""What the loop asks its activities and what its status query answers, built from the run's
input and state.

Pure functions: the workflow passes in what only it may read (the clock, its workflow id), so
these replay identically and tests can call them without Temporal.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Optional, Sequence

from workflows import lineage
from workflows import notebook as nb
from workflows import proposer_health, rules
from workflows.types import (
    Candidate,
    CandidateState,
    CompactInput,
    EvaluateInput,
    EvaluateResult,
    OptimizeInput,
    ProposeInput,
    RecordInput,
    RunCreateInfo,
    RunProgressInput,
    RunState,
    RunStatus,
)


def propose_request(inp: OptimizeInput, state: RunState, iteration: int) -> ProposeInput:
    return ProposeInput(
        run_id=inp.run_id,
        problem=inp.problem,
        goal=inp.goal,
        iteration=iteration,
        count=inp.candidates_per_iteration,
        proposer=inp.proposer,
        notebook=state.notebook,
        best=lineage.proposal_base(state),
        last_feedback=state.last_feedback,
        tokens_left=rules.tokens_left(inp.budget, state),
    )


def evaluate_request(inp: OptimizeInput, iteration: int, candidate: Candidate, confirm: bool) -> EvaluateInput:
    """A confirmation (the would-be champion's second, longer judgement) also asks for the
    Nsight Compute profile: one per new best, so the profiler's extra time stays bounded."""
    return EvaluateInput(
        run_id=inp.run_id,
        iteration=iteration,
        index=candidate.index,
        problem=inp.problem,
        source_sha=candidate.source_sha,
        device=inp.device,
        confirm=confirm,
        timeout_s=inp.evaluate_timeout_s,
        profile=confirm,
    )


def record_requests(
    run_id: str,
    iteration: int,
    candidates: Sequence[Candidate],
    results: Sequence[EvaluateResult],
    best_position: Optional[int],
) -> list[RecordInput]:
    """One "record" request per attempt, in candidate order; the champion's says ``is_best``."""
    return [
        RecordInput(
            run_id=run_id,
            iteration=iteration,
            index=candidate.index,
            candidate=candidate,
            result=result,
            is_best=position == best_position,
        )
        for position, (candidate, result) in enumerate(zip(candidates, results))
    ]


def compact_request(inp: OptimizeInput, state: RunState) -> CompactInput:
    keep = nb.keep_recent_for(inp.notebook_limit)
    return CompactInput(
        run_id=inp.run_id, goal=inp.goal, notebook=state.notebook, proposer=inp.proposer, keep_recent=keep
    )


def progress_request(
    inp: OptimizeInput,
    state: RunState,
    status: str,
    stop_reason: str,
    now: datetime,
    create_with_workflow_id: Optional[str] = None,
) -> RunProgressInput:
    """The run row as it stands. With ``create_with_workflow_id`` (a run's first segment) it also
    carries what the store needs to insert the row of a run started without the API."""
    create = None
    if create_with_workflow_id is not None:
        create = RunCreateInfo(
            problem=inp.problem,
            budget=inp.budget,
            proposer=inp.proposer,
            candidates_per_iteration=inp.candidates_per_iteration,
            workflow_id=create_with_workflow_id,
            from_run=inp.start_from.run_id if inp.start_from else None,
            from_kind=inp.start_from.kind if inp.start_from else None,
        )
    return RunProgressInput(
        run_id=inp.run_id,
        status=status,
        iteration=state.iteration,
        best_speedup=state.best.speedup if state.best else None,
        stop_reason=stop_reason,
        goal=inp.goal,
        create=create,
        budget_used=rules.budget_used(state, rules.hours_since(state.started_at, now)),
    )


@dataclasses.dataclass
class LoopView:
    """What only the running workflow knows beyond its input and state."""

    status: str
    phase: str
    stop_reason: str
    candidates: list[CandidateState]
    candidates_iteration: int
    evaluate_queue: str


def status_answer(inp: OptimizeInput, state: RunState, view: LoopView, now: datetime) -> RunStatus:
    """The status query's answer. A pause that arrived mid-iteration shows at once (the iteration
    finishes first)."""
    goal = inp.goal
    status, phase = view.status, view.phase
    if state.paused and status == "running":
        status, phase = "paused", f"pausing after iteration {state.iteration + 1} ({phase})"
    elif state.stop_requested and status == "running":
        phase = f"stopping: asked to stop, ending after the current step ({phase})"
    start = inp.start_from
    return RunStatus(
        run_id=inp.run_id,
        problem=inp.problem,
        status=status,
        phase=phase,
        iteration=state.iteration,
        goal=goal,
        best_speedup=state.best.speedup if state.best else None,
        best_roofline=state.best.roofline if state.best else None,
        distance=goal.distance(rules.best_value(goal, state.best)),
        budget=inp.budget,
        budget_used=rules.budget_used(state, rules.hours_since(state.started_at, now)),
        stop_reason=view.stop_reason,
        segment=state.segment,
        message=state.pause_reason or proposer_health.failing_note(state),
        hints=len(state.notebook.hints),
        candidates=[dataclasses.replace(c) for c in view.candidates],
        candidates_iteration=view.candidates_iteration,
        evaluate_queue=view.evaluate_queue,
        start_iteration=start.iteration if start is not None and start.kind == "continue" else 0,
    )
