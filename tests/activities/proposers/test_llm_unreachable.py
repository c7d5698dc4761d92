"""An LLM endpoint that cannot be reached: each iteration's propose step fails after its retries,
the run says "proposer failing: <reason>" while it goes on, and after a bounded number of
iterations without a candidate it ends ``failed`` with that reason, not ``completed`` with 0
attempts. A real dev server, real workers, real HTTP to a port nothing listens on."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest
from temporalio import activity
from temporalio.client import WorkflowFailureError
from temporalio.common import RetryPolicy
from datetime import timedelta

from marathon.local_loop import local_loop
from marathon.settings import Settings
from proposer_toy_problem import OBJECT_PATH as TOY_PROBLEM
from store.db import session_scope
from store.repository import get_run, list_attempts
from workflows import messages, proposer_health, steps
from workflows.types import (
    Budget, Candidate, EvaluateInput, EvaluateResult, Goal, OptimizeInput, ProposerConfig, RunState,
)

UNREACHABLE = "http://127.0.0.1:9/v1"  # the discard port: nothing listens there


@activity.defn(name="evaluate")
async def evaluate(request: EvaluateInput) -> EvaluateResult:
    raise AssertionError("nothing is evaluated when the proposer gives no candidate")


async def test_an_unreachable_endpoint_fails_the_run_after_a_few_iterations(temporal_env, store_url, tmp_path,
                                                                             monkeypatch):
    # Production retries a failing call for about a minute; the rule under test is the same with two quick tries.
    monkeypatch.setattr(steps, "PROPOSE_RETRY", RetryPolicy(initial_interval=timedelta(milliseconds=100),
                                                            maximum_attempts=2))
    settings = Settings(_env_file=None, home=tmp_path, llm_base_url=UNREACHABLE, llm_model="fake-model")
    queue, evaluate_queue = f"cpu-{uuid.uuid4().hex[:8]}", f"eval-{uuid.uuid4().hex[:8]}"
    run_id = f"run-unreachable-{uuid.uuid4().hex[:8]}"
    async with local_loop(temporal_env.client, settings, task_queue=queue, evaluate_queue=evaluate_queue,
                          database_url=store_url, evaluate_activities=[evaluate]) as loop:
        with pytest.raises(WorkflowFailureError) as failure:
            await loop.execute(OptimizeInput(
                run_id=run_id, problem=TOY_PROBLEM, goal=Goal(target=10.0), budget=Budget(iterations=50),
                proposer=ProposerConfig(kind="llm"), candidates_per_iteration=2,
                evaluate_task_queue=evaluate_queue, gpu_wait_s=60.0,
            ))
    reason = str(failure.value.cause)
    limit = proposer_health.FAILING_LIMIT
    assert f"the llm proposer produced no candidate in {limit} iterations in a row" in reason
    assert f"LLM endpoint {UNREACHABLE} is unreachable" in reason
    with session_scope(store_url) as session:
        run = get_run(session, run_id)
        assert run.status == "failed" and run.iteration == limit
        assert f"LLM endpoint {UNREACHABLE} is unreachable" in run.stop_reason
        assert list_attempts(session, run_id)[1] == 0


def test_the_count_says_proposer_failing_and_a_candidate_clears_it():
    state = RunState()
    proposer_health.propose_failed(state, "LLM endpoint x is unreachable: refused")
    proposer_health.after_iteration(state, None)
    note = proposer_health.failing_note(state)
    assert note == ("proposer failing: LLM endpoint x is unreachable: refused "
                    f"(1 of {proposer_health.FAILING_LIMIT} iterations without a candidate before the run fails)")
    assert proposer_health.fatal_reason(state, "llm") == ""
    # Replies that were all unusable count too, with the first one's error.
    proposer_health.after_iteration(state, [Candidate(index=0, source_sha="s", strategy="", error="no code block")])
    assert state.proposer_failures == 2 and state.proposer_failure == "no code block"
    proposer_health.after_iteration(state, [Candidate(index=0, source_sha="s", strategy="x")])
    assert state.proposer_failures == 0 and proposer_health.failing_note(state) == ""
    for _ in range(proposer_health.FAILING_LIMIT):
        proposer_health.propose_failed(state, "refused")
        proposer_health.after_iteration(state, None)
    assert proposer_health.fatal_reason(state, "llm").startswith("the llm proposer produced no candidate in 3")


def test_the_status_query_says_the_proposer_is_failing():
    state = RunState(started_at=datetime.now(timezone.utc).isoformat())
    proposer_health.propose_failed(state, "LLM endpoint x is unreachable")
    proposer_health.after_iteration(state, None)
    view = messages.LoopView(status="running", phase="proposing", stop_reason="", candidates=[],
                             candidates_iteration=0, evaluate_queue="q")
    answer = messages.status_answer(OptimizeInput(run_id="r", problem="p"), state, view, datetime.now(timezone.utc))
    assert answer.message.startswith("proposer failing: LLM endpoint x is unreachable (1 of 3")


def test_the_api_says_proposer_failing_while_temporal_retries_the_first_call():
    """Before an iteration has failed, Temporal's pending "propose" activity (attempt 2 and on,
    with its last failure) is what tells the API that the proposer is failing."""
    from types import SimpleNamespace

    from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionResponse

    from api.temporal import propose_retrying

    raw = DescribeWorkflowExecutionResponse()
    description = SimpleNamespace(raw_description=raw)
    first = raw.pending_activities.add()
    first.activity_type.name, first.attempt = "propose", 1
    assert propose_retrying(description) == ""  # the first try: nothing has failed yet
    first.attempt = 3
    first.last_failure.message = f"LLM endpoint {UNREACHABLE} is unreachable: Connection refused"
    assert propose_retrying(description) == (
        f"proposer failing: LLM endpoint {UNREACHABLE} is unreachable: Connection refused (attempt 3, retrying)"
    )
