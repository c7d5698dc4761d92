"""The steady loop's bookkeeping without Temporal: the window, when to propose, the order work
starts in, confirmations ahead of the queue, a job sent back after a missing worker, and the
challenger rule against confirmations still pending."""

from __future__ import annotations

import pytest

from api.progress import candidates_line
from workflows import rules
from workflows.candidates import CandidateBoard
from workflows.pipeline import Pipeline, should_propose, window
from workflows.types import Candidate, EvaluateResult, Goal


def candidates(count: int, error_at: int = -1) -> list[Candidate]:
    return [Candidate(index=i, source_sha=f"sha{i}", strategy=f"s{i}", error="bad" if i == error_at else None)
            for i in range(count)]


def test_the_window_is_the_setting_or_one_iteration():
    assert window(0, 4) == 4
    assert window(8, 4) == 8
    with pytest.raises(ValueError, match="evaluations_in_flight must be >= 0, got -1"):
        window(-1, 4)
    with pytest.raises(ValueError, match="1..256, got 0"):
        Pipeline(0)


def test_the_next_iteration_is_proposed_while_under_half_a_window_waits():
    assert should_propose(0, 1) and not should_propose(1, 1)
    assert should_propose(3, 8) and not should_propose(4, 8)
    assert should_propose(1, 3) and not should_propose(2, 3)


def test_work_starts_in_order_up_to_the_window_and_confirmations_go_first():
    pipe = Pipeline(2)
    first = pipe.add(1, candidates(3, error_at=1), [], {1: EvaluateResult(status="proposal_error")})
    assert [job.key for job in pipe.queue] == [(1, 0, False), (1, 2, False)]  # the proposal error waits for nothing
    pipe.add(2, candidates(2), [], {})
    started = [pipe.next_job(), pipe.next_job()]
    assert [job.key for job in started] == [(1, 0, False), (1, 2, False)]
    assert pipe.next_job() is None  # the window is full
    pipe.finished(started[0])
    first.results[0] = EvaluateResult(status="ok", speedup=2.0)
    first.results[2] = EvaluateResult(status="ok", speedup=1.5)
    assert first.judged and [r.speedup for r in first.ordered_results()] == [2.0, None, 1.5]
    pipe.confirm(first, 0)
    assert pipe.awaiting_confirmation()[0].speedup == 2.0
    assert pipe.next_job().key == (1, 0, True)  # ahead of iteration 2's candidates
    pipe.finished(started[1])
    missing = pipe.next_job()
    assert missing.key == (2, 0, False)
    pipe.retry_first(missing)  # no worker took it: it goes back to the front
    assert pipe.queue[0].key == (2, 0, False) and missing.key not in pipe.in_flight
    assert pipe.busy
    with pytest.raises(ValueError, match="iteration 2 is already open"):
        pipe.add(2, candidates(1), [], {})
    in_flight = pipe.drop_all()
    assert [job.key for job in in_flight] == [(1, 0, True)] and not pipe.busy


def test_a_challenger_must_outscore_those_awaiting_confirmation():
    goal = Goal(target=10.0)
    fast, slow = EvaluateResult(status="ok", speedup=2.0), EvaluateResult(status="ok", speedup=1.5)
    assert rules.outscores(goal, fast, [slow, EvaluateResult(status="incorrect")])
    assert not rules.outscores(goal, slow, [fast])
    assert not rules.outscores(goal, fast, [EvaluateResult(status="ok", speedup=2.0)])  # a tie is not better
    assert not rules.outscores(goal, EvaluateResult(status="incorrect"), [])


def test_the_board_shows_every_open_iteration_and_keeps_the_last_closed():
    board = CandidateBoard()
    board.open(1, candidates(2))
    board.open(2, candidates(1))
    board.mark_at(1, 0, "ok")
    board.close(1)
    assert [(s.iteration, s.index) for s in board.states] == [(2, 0)]
    board.close(2)
    assert [(s.iteration, s.state) for s in board.states] == [(2, "proposed")]  # shown until another opens
    board.open(3, candidates(1))
    assert board.iteration == 3
    board.cancel_unfinished()
    assert [s.state for s in board.states] == ["cancelled"]


def test_the_candidates_line_groups_iterations():
    rows = [{"index": 0, "state": "ok", "iteration": 4}, {"index": 1, "state": "confirming", "iteration": 4},
            {"index": 0, "state": "evaluating", "iteration": 5}]
    assert candidates_line({"candidates": rows}) == "iteration 4: #0 ok, #1 confirming; iteration 5: #0 evaluating"
    older = {"candidates": [{"index": 0, "state": "ok"}], "candidates_iteration": 3}
    assert candidates_line(older) == "iteration 3: #0 ok"
