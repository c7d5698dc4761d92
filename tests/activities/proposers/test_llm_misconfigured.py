"""A proposer that cannot work ends the run ``failed`` with the reason, in the store and in
Temporal (the workflow fails, its MarathonStatus search attribute says ``failed``), instead of
spending its iterations on nothing and ending ``completed`` with 0 attempts (issue 13, item 1)."""

from __future__ import annotations

import uuid

import pytest
from fakes.openai_server import error_reply
from proposer_toy_problem import OBJECT_PATH as TOY_PROBLEM
from temporalio import activity
from temporalio.client import WorkflowFailureError

from marathon.local_loop import local_loop
from marathon.settings import Settings
from store.db import session_scope
from store.repository import get_run, list_attempts
from workflows import search_attributes as sa
from workflows.types import Budget, EvaluateInput, EvaluateResult, Goal, OptimizeInput, ProposerConfig


@activity.defn(name="evaluate")
async def evaluate(request: EvaluateInput) -> EvaluateResult:
    raise AssertionError("nothing is evaluated when the proposer cannot work")


async def _run(client, settings: Settings, store_url: str) -> tuple[str, BaseException]:
    queue, evaluate_queue = f"cpu-{uuid.uuid4().hex[:8]}", f"eval-{uuid.uuid4().hex[:8]}"
    run_id = f"run-misconf-{uuid.uuid4().hex[:8]}"
    async with local_loop(
        client, settings, task_queue=queue, evaluate_queue=evaluate_queue,
        database_url=store_url, evaluate_activities=[evaluate],
    ) as loop:
        with pytest.raises(WorkflowFailureError) as failure:
            await loop.execute(
                OptimizeInput(
                    run_id=run_id,
                    problem=TOY_PROBLEM,
                    goal=Goal(target=10.0),
                    budget=Budget(iterations=5),
                    proposer=ProposerConfig(kind="llm"),
                    candidates_per_iteration=2,
                    evaluate_task_queue=evaluate_queue,
                    gpu_wait_s=60.0,
                )
            )
        description = await client.get_workflow_handle(run_id).describe()
    assert description.typed_search_attributes.get(sa.STATUS) == "failed"
    assert description.typed_search_attributes.get(sa.ITERATION) == 0
    return run_id, failure.value


async def test_no_llm_endpoint_fails_the_run_with_what_to_set(temporal_env, store_url, tmp_path):
    settings = Settings(_env_file=None, home=tmp_path, llm_base_url=None)
    run_id, failure = await _run(temporal_env.client, settings, store_url)
    cause = failure.cause
    assert "MARATHON_LLM_BASE_URL" in str(cause), cause
    # What the API reads from Temporal for a run whose store row lags: failed, with the reason.
    from api.temporal import TemporalGateway

    async def factory():
        return temporal_env.client

    live = await TemporalGateway(settings, factory).live_state(run_id)
    assert live.status == "failed"
    assert live.stop_reason.startswith("the workflow failed: the llm proposer cannot work (iteration 1)")
    with session_scope(store_url) as session:
        run = get_run(session, run_id)
        assert run.status == "failed"
        assert run.stop_reason.startswith("the llm proposer cannot work (iteration 1): the llm proposer needs an endpoint")
        assert "MARATHON_LLM_BASE_URL" in run.stop_reason
        assert run.iteration == 0
        assert list_attempts(session, run_id)[1] == 0


async def test_an_endpoint_that_rejects_the_request_fails_the_run(temporal_env, fake_llm, llm_settings, store_url):
    fake_llm.script(error_reply(404, "model fake-model does not exist"))
    run_id, _ = await _run(temporal_env.client, llm_settings, store_url)
    assert len(fake_llm.requests) == 1  # not retried, not asked again on the next iteration
    with session_scope(store_url) as session:
        run = get_run(session, run_id)
        assert run.status == "failed"
        assert "HTTP 404" in run.stop_reason and "does not exist" in run.stop_reason
