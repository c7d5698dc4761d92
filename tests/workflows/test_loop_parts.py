"""The loop's parts outside the workflow class: how failed evaluations read, what each activity
is asked, the status query's answer and the candidates' states. Without Temporal's server."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from temporalio.exceptions import ActivityError, RetryState, TimeoutError as TemporalTimeoutError, TimeoutType

from workflows import messages, steps
from workflows.candidates import CandidateBoard
from workflows.types import BestKernel, Budget, Candidate, EvaluateResult, Goal, Notebook, OptimizeInput, RunState


def activity_error(message: str, cause: BaseException) -> ActivityError:
    error = ActivityError(
        message, scheduled_event_id=1, started_event_id=2, identity="w", activity_type="evaluate",
        activity_id="1", retry_state=RetryState.TIMEOUT,
    )
    error.__cause__ = cause
    return error


def test_evaluation_results_keep_candidate_order_and_spot_a_missing_worker():
    candidates = [Candidate(0, "a", "s0"), Candidate(1, "b", "s1", error="no code block"), Candidate(2, "c", "s2")]
    crashed = activity_error("activity failed", RuntimeError("worker died"))
    results, missing = steps.evaluation_results(candidates, [EvaluateResult(status="ok", speedup=1.2), crashed])
    assert [r.status for r in results] == ["ok", "proposal_error", "crashed"] and not missing
    assert results[1].message == "no code block" and results[1].timing_kind == ""
    assert results[2].message == "evaluation failed: activity failed: worker died"
    waited = activity_error("activity timed out", TemporalTimeoutError("", type=TimeoutType.SCHEDULE_TO_START,
                                                                     last_heartbeat_details=[]))
    results, missing = steps.evaluation_results(candidates, [waited, EvaluateResult(status="incorrect")])
    assert missing and [r.status for r in results] == ["proposal_error", "incorrect"]
    with pytest.raises(KeyError):
        steps.evaluation_results(candidates[:1], [KeyError("a bug in the workflow, not a failed activity")])


def test_failure_message_follows_causes_up_to_four():
    error = activity_error("a", activity_error("b", activity_error("c", activity_error("d", ValueError("e")))))
    assert steps.failure_message(error) == "a: b: c: d"
    assert steps.failure_message(ValueError()) == "ValueError"


def test_requests_carry_the_run_and_its_state():
    inp = OptimizeInput(run_id="r", problem="kda", goal=Goal(target=3.0), budget=Budget(tokens=500),
                        candidates_per_iteration=3, evaluate_timeout_s=60.0, notebook_limit=10)
    state = RunState(iteration=4, tokens=200, best=BestKernel(2, 1, "s", "tile", speedup=1.5),
                     started_at="2026-01-01T00:00:00+00:00", last_feedback=["#0 t: ok"])
    propose = messages.propose_request(inp, state, 5)
    assert (propose.iteration, propose.count, propose.tokens_left, propose.last_feedback) == (5, 3, 300, ["#0 t: ok"])
    evaluate = messages.evaluate_request(inp, 5, Candidate(2, "sha", "s"), confirm=True)
    assert (evaluate.index, evaluate.source_sha, evaluate.confirm, evaluate.timeout_s) == (2, "sha", True, 60.0)
    candidates = [Candidate(0, "a", "s"), Candidate(1, "b", "s")]
    records = messages.record_requests("r", 5, candidates, [EvaluateResult("ok"), EvaluateResult("incorrect")], 1)
    assert [(r.index, r.is_best, r.result.status) for r in records] == [(0, False, "ok"), (1, True, "incorrect")]
    assert messages.compact_request(inp, state).keep_recent == 5
    now = datetime(2026, 1, 1, 2, tzinfo=timezone.utc)
    first = messages.progress_request(inp, state, "running", "", now, create_with_workflow_id="wf")
    later = messages.progress_request(inp, state, "completed", "plateau", now + timedelta(hours=1))
    assert first.create is not None and first.create.workflow_id == "wf" and later.create is None
    assert (first.best_speedup, first.budget_used["hours"], later.budget_used["hours"]) == (1.5, 2.0, 3.0)


def test_the_status_answer_shows_a_pause_at_once_and_copies_the_candidates():
    board = CandidateBoard()
    board.start(5, [Candidate(0, "a", "x" * 300), Candidate(1, "b", "s", error="bad reply")])
    view = messages.LoopView("running", "evaluating", "", board.states, board.iteration, "marathon-gpu-sm90")
    state = RunState(iteration=4, paused=True, notebook=Notebook(hints=["h"]))
    answer = messages.status_answer(OptimizeInput(run_id="r", problem="kda"), state, view, datetime.now(timezone.utc))
    assert (answer.status, answer.phase) == ("paused", "pausing after iteration 5 (evaluating)")
    assert [(c.state, len(c.strategy)) for c in answer.candidates] == [("proposed", 120), ("proposal_error", 1)]
    board.mark(0, "evaluating")
    assert answer.candidates[0].state == "proposed", "the answer is a copy"
    assert (answer.hints, answer.distance, answer.candidates_iteration) == (1, 1.0, 5)


async def test_the_board_follows_an_evaluation_to_its_end():
    board = CandidateBoard()
    board.start(1, [Candidate(0, "a", "s"), Candidate(1, "b", "s")])

    async def judged() -> EvaluateResult:
        return EvaluateResult(status="incorrect")

    async def failing() -> EvaluateResult:
        raise RuntimeError("lost")

    assert (await board.track(0, judged(), lambda: False)).status == "incorrect"
    with pytest.raises(RuntimeError):
        await board.track(1, failing(), lambda: False)
    assert [c.state for c in board.states] == ["incorrect", "evaluation failed"]
    with pytest.raises(RuntimeError):
        await board.track(1, failing(), lambda: True)
    assert board.states[1].state == "cancelled"
    task = asyncio.ensure_future(board.track(0, asyncio.sleep(10), lambda: False))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert board.states[0].state == "cancelled"
