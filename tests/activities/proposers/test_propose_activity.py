"""The propose activity with the search proposer: history from the store, candidates into the
artifact store, the same proposal on a retry, and bad input failing for good."""

from __future__ import annotations

import proposer_toy_problem as toy_problem
import proposer_toy_space as toy
import pytest
from proposer_requests import RUN_ID
from proposer_toy_problem import OBJECT_PATH as TOY_PROBLEM
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.propose import ProposeActivities
from activities.proposers.base import PastAttempt
from kernels.knob_space import KnobSpace
from activities.proposers.search import choose_points, generator_for
from store.artifacts import get_text
from store.db import session_scope
from store.repository import list_attempts, record_attempt
from workflows.types import Goal, Notebook, ProposeInput, ProposerConfig

SPACE = KnobSpace(toy)


def request(iteration: int, count: int = 4, **overrides) -> ProposeInput:
    values = dict(
        run_id=RUN_ID,
        problem=TOY_PROBLEM,
        goal=Goal(),
        iteration=iteration,
        count=count,
        proposer=ProposerConfig(kind="search", seed=7),
        notebook=Notebook(),
    )
    values.update(overrides)
    return ProposeInput(**values)


async def propose(store_url, req):
    return await ActivityEnvironment().run(ProposeActivities(database_url=store_url).propose, req)


def record(store_url, iteration, candidates, statuses):
    with session_scope(store_url) as session:
        for candidate, (status, speedup) in zip(candidates, statuses):
            record_attempt(
                session,
                run_id=RUN_ID,
                iteration=iteration,
                index=candidate.index,
                strategy=candidate.strategy,
                knobs=candidate.knobs,
                source_sha=candidate.source_sha,
                status=status,
                message="" if status == "ok" else f"{status} in the toy",
                speedup=speedup,
                roofline=None,
                timing_kind="interpreter",
                report_sha=None,
                is_best=False,
                gpu_seconds=0.0,
            )


async def test_candidates_are_rendered_points_stored_by_reference(store_url):
    result = await propose(store_url, request(0))
    assert [c.index for c in result.candidates] == [0, 1, 2, 3]
    assert result.candidates[0].knobs == toy.DEFAULT
    with session_scope(store_url) as session:
        for candidate in result.candidates:
            assert candidate.error is None
            assert get_text(session, candidate.source_sha) == toy.render(candidate.knobs)
            assert candidate.strategy == toy.describe(candidate.knobs)
    assert result.tokens_used == 0 and result.errors == []


async def test_history_in_the_store_steers_and_nothing_recorded_is_proposed_again(store_url):
    first = await propose(store_url, request(0))
    outcomes = [("ok", 1.0), ("compile_error", None), ("ok", 1.4), ("incorrect", None)]
    record(store_url, 0, first.candidates, outcomes)
    second = await propose(store_url, request(1))
    recorded = {SPACE.key(c.knobs) for c in first.candidates}
    assert len(second.candidates) == 4
    assert not recorded & {SPACE.key(c.knobs) for c in second.candidates}
    # The activity hands the search exactly what the store holds: its points are the search's
    # points for that history, and the best point (1.4x) is the parent of at least one of them.
    history = [
        PastAttempt(0, c.index, c.strategy, c.knobs, status, speedup, "" if status == "ok" else f"{status} in the toy")
        for c, (status, speedup) in zip(first.candidates, outcomes)
    ]
    expected = choose_points(SPACE, history, 4, generator_for(toy_problem.PROBLEM.name, 7, 1))
    assert [c.knobs for c in second.candidates] == [dict(point) for point, _ in expected]
    assert any(parent == first.candidates[2].knobs for _, parent in expected)


async def test_a_retry_proposes_the_same_even_after_a_partial_record(store_url):
    first = await propose(store_url, request(0))
    record(store_url, 0, first.candidates, [("ok", 1.0), ("ok", 1.1), ("ok", 0.9), ("ok", 1.2)])
    before = await propose(store_url, request(1))
    # An earlier try of iteration 1 already recorded one attempt; the retry must not notice.
    record(store_url, 1, before.candidates[:1], [("ok", 2.0)])
    again = await propose(store_url, request(1))
    assert again == before


def history_from_full_rows(store_url, before_iteration: int) -> list[PastAttempt]:
    """How the activity read its history before the column query: every attempt as a full row,
    page by page, keeping those of earlier iterations."""
    history, offset = [], 0
    with session_scope(store_url) as session:
        while True:
            page, total = list_attempts(session, RUN_ID, offset=offset, limit=7)
            history += [
                PastAttempt(r.iteration, r.index, r.strategy or "", r.knobs, r.status, r.speedup, r.message or "",
                            r.roofline)
                for r in page
                if r.iteration < before_iteration
            ]
            offset += len(page)
            if not page or offset >= total:
                return history


async def test_the_history_query_gives_the_same_past_attempts_as_the_full_rows(store_url):
    with session_scope(store_url) as session:
        for iteration in range(6):
            for index in (2, 0, 1):  # recorded out of order, as concurrent record activities do
                failed = (iteration + index) % 3 == 0
                record_attempt(
                    session, run_id=RUN_ID, iteration=iteration, index=index, strategy=f"s{iteration}.{index}",
                    knobs=None if index == 2 else {"BLOCK": 16 * (index + 1), "warps": iteration},
                    source_sha="a" * 64, status="incorrect" if failed else "ok",
                    message=f"rel rms {iteration}" if failed else "", speedup=None if failed else 1 + iteration / 8,
                    roofline=None if failed else iteration / 10, timing_kind="interpreter", report_sha=None,
                    is_best=False, gpu_seconds=0.0,
                )
    reader = ProposeActivities(database_url=store_url)
    for iteration in (0, 1, 4, 6, 50):
        read = reader._read_history(request(iteration))
        assert read == history_from_full_rows(store_url, iteration)
        assert len(read) == 3 * min(iteration, 6)


async def test_a_hint_in_the_notebook_is_tried_next(store_url):
    first = await propose(store_url, request(0))
    record(store_url, 0, first.candidates, [("ok", 1.0)] * 4)
    result = await propose(store_url, request(1, notebook=Notebook(hints=["try SPLIT=8 and num_warps=4"])))
    assert result.candidates[0].knobs["SPLIT"] == 8 and result.candidates[0].knobs["num_warps"] == 4


@pytest.mark.parametrize(
    "overrides, text",
    [
        (dict(problem="no-such-problem"), "unknown problem 'no-such-problem'"),
        (dict(count=0), "count must be between 1 and 64, got 0"),
        (dict(proposer=ProposerConfig(kind="oracle")), "proposer kind must be one of search, llm"),
    ],
    ids=["unknown-problem", "count-0", "unknown-proposer"],
)
async def test_bad_input_fails_without_retries(store_url, overrides, text):
    with pytest.raises(ApplicationError) as caught:
        await propose(store_url, request(0, **overrides))
    assert caught.value.non_retryable and caught.value.type == "BadProposeInput"
    assert text in caught.value.message
