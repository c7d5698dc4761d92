"""A rate-limited LLM call is retried by Temporal: real dev server, real worker, real HTTP."""

from __future__ import annotations

import uuid

from fakes.openai_server import completion_reply, error_reply
from propose_once_workflow import ProposeOnceWorkflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import Worker
from proposer_requests import GOOD_REPLY, KERNEL
from proposer_requests import llm_request as request

from activities.propose import ProposeActivities
from store.artifacts import get_text
from store.db import session_scope
from workflows.types import ProposerConfig


async def run_propose(temporal_env, store_url, llm, req):
    queue = f"propose-{uuid.uuid4().hex[:8]}"
    activities = ProposeActivities(database_url=store_url, llm=llm)
    async with Worker(temporal_env.client, task_queue=queue, workflows=[ProposeOnceWorkflow], activities=[activities.propose]):
        handle = await temporal_env.client.start_workflow(
            ProposeOnceWorkflow.run, req, id=f"propose-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        try:
            return handle, await handle.result()
        except WorkflowFailureError as failure:
            return handle, failure


async def test_429_then_success_is_retried_by_temporal_after_retry_after(temporal_env, fake_llm, llm, store_url):
    fake_llm.script(error_reply(429, "rate limited", retry_after=1), completion_reply(GOOD_REPLY, total_tokens=77))
    handle, result = await run_propose(temporal_env, store_url, llm, request())
    assert len(fake_llm.requests) == 2
    assert fake_llm.requests[0].body == fake_llm.requests[1].body
    assert result.tokens_used == 77 and result.candidates[0].error is None
    with session_scope(store_url) as session:
        assert get_text(session, result.candidates[0].source_sha) == KERNEL
    history = await handle.fetch_history()
    [started] = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED]
    attrs = started.activity_task_started_event_attributes
    assert attrs.attempt == 2
    assert attrs.last_failure.application_failure_info.type == "LLMRateLimited"
    assert attrs.last_failure.application_failure_info.next_retry_delay.ToTimedelta().total_seconds() == 1


async def test_a_rejected_request_is_not_retried(temporal_env, fake_llm, llm, store_url):
    fake_llm.script(error_reply(400, "bad request"), completion_reply(GOOD_REPLY))
    _, failure = await run_propose(temporal_env, store_url, llm, request())
    assert isinstance(failure, WorkflowFailureError)
    assert isinstance(failure.cause, ActivityError)
    cause = failure.cause.cause
    assert isinstance(cause, ApplicationError) and cause.non_retryable and cause.type == "LLMRequestRejected"
    assert len(fake_llm.requests) == 1 and fake_llm.pending() == 1


async def test_the_search_proposer_runs_in_a_worker_too(temporal_env, fake_llm, llm, store_url):
    _, result = await run_propose(temporal_env, store_url, llm, request(count=2, proposer=ProposerConfig()))
    assert [c.index for c in result.candidates] == [0, 1]
    assert all(c.knobs is not None and c.error is None for c in result.candidates)
    assert fake_llm.requests == [], "the search proposer needs no network"
