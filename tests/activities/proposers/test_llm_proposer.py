"""The LLM proposer through the propose activity, with the real openai client over real HTTP
against the fake server, and the real store (SQLite)."""

from __future__ import annotations

import dataclasses
import logging
from datetime import timedelta

import proposer_toy_space as toy
import pytest
from fakes.openai_server import completion_reply, error_reply, raw_reply
from proposer_requests import FAKE_KEY, GOOD_REPLY, INTENT, KERNEL
from proposer_requests import llm_request as request
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.propose import ProposeActivities
from store.artifacts import get_text, put_text
from store.db import session_scope
from workflows.types import BestKernel, ProposerConfig

async def propose(llm, store_url, req):
    return await ActivityEnvironment().run(ProposeActivities(database_url=store_url, llm=llm).propose, req)


async def test_the_prompt_opens_with_the_goal_then_problem_rules_best_notebook_feedback(fake_llm, llm, store_url):
    fake_llm.script(completion_reply(GOOD_REPLY))
    await propose(llm, store_url, request())
    [sent] = fake_llm.requests
    messages = sent.messages()
    assert messages[0]["role"] == "system" and messages[0]["content"].startswith("# Goal\nReach 1.8x geomean speedup")
    text = sent.prompt_text()
    markers = [
        INTENT,
        "# Problem: toy-double",
        "# Rules",
        "# Best kernel so far",
        "# Notebook",
        "# Feedback on the last attempts",
        "# Your answer",
    ]
    positions = [text.index(marker) for marker in markers]
    assert positions == sorted(positions), dict(zip(markers, positions))
    seed = toy.render(toy.DEFAULT)
    assert seed in text
    for fragment in ("flash_attn", "liger_kernel", "subprocess", "`kernel(**inputs)`", "N=65536", "keyword arguments: x"):
        assert fragment in text
    notebook = text[text.index("# Notebook"):text.index("# Feedback on the last attempts")]
    for fragment in ("tiles above 128 spill", "split 16: incorrect", "try SPLIT=4", "iter 2 #0 [incorrect]"):
        assert fragment in notebook
    assert "iter 2 #0 incorrect, max error 3e-2" in text[text.index("# Feedback on the last attempts"):]
    assert sent.body["model"] == "fake-model" and sent.body["temperature"] == 0.3
    assert sent.headers["authorization"] == f"Bearer {FAKE_KEY}"


async def test_the_code_block_becomes_a_stored_candidate_and_tokens_are_counted(fake_llm, llm, store_url):
    fake_llm.script(completion_reply(GOOD_REPLY, total_tokens=120), completion_reply(GOOD_REPLY, total_tokens=95))
    result = await propose(llm, store_url, request(count=2))
    assert len(fake_llm.requests) == 2
    assert "candidate 1 of 2" in fake_llm.requests[0].prompt_text()
    assert "candidate 2 of 2" in fake_llm.requests[1].prompt_text()
    assert result.tokens_used == 215 and result.errors == []
    assert [c.index for c in result.candidates] == [0, 1]
    candidate = result.candidates[0]
    assert candidate.error is None and candidate.knobs is None
    assert candidate.strategy == "one program per 4096 elements"
    with session_scope(store_url) as session:
        assert get_text(session, candidate.source_sha) == KERNEL


async def test_a_malformed_reply_becomes_a_candidate_with_an_error(fake_llm, llm, store_url):
    prose = "I would use a bigger tile and fewer warps, but I cannot write the code."
    fake_llm.script(completion_reply(prose), completion_reply("```python\ndef helper():\n    pass\n```"))
    result = await propose(llm, store_url, request(count=2))
    first, second = result.candidates
    assert "no fenced ```python code block" in first.error
    assert second.error == "the reply's code block does not define kernel(**inputs)"
    assert result.tokens_used == 240
    with session_scope(store_url) as session:
        assert get_text(session, first.source_sha) == prose


async def test_the_best_kernel_and_its_speedup_are_in_the_prompt(fake_llm, llm, store_url):
    best_source = KERNEL.replace("pass", "tl.store(x_ptr, 1.0)")
    with session_scope(store_url) as session:
        sha = put_text(session, best_source)
    best = BestKernel(iteration=1, index=2, source_sha=sha, strategy="BLOCK=128 fast path", speedup=1.25)
    fake_llm.script(completion_reply(GOOD_REPLY))
    await propose(llm, store_url, request(best=best))
    text = fake_llm.requests[0].prompt_text()
    assert best_source.strip() in text
    assert "1.250x speedup, strategy: BLOCK=128 fast path" in text
    assert "Best so far: 1.250 (31% short of the target)" in text


async def test_no_call_is_made_once_the_token_budget_is_spent(fake_llm, llm, store_url):
    fake_llm.script(*[completion_reply(GOOD_REPLY, total_tokens=120) for _ in range(3)])
    result = await propose(llm, store_url, request(count=3, tokens_left=150))
    assert len(fake_llm.requests) == 2 and len(result.candidates) == 2
    assert result.tokens_used == 240
    assert result.errors == ["LLM token budget spent: 240 used of 150 left; 2 of 3 candidates proposed"]
    spent = await propose(llm, store_url, request(count=3, tokens_left=0))
    assert len(fake_llm.requests) == 2
    assert spent.candidates == [] and spent.tokens_used == 0 and "budget spent" in spent.errors[0]


async def test_a_missing_usage_is_estimated_not_free(fake_llm, llm, store_url):
    fake_llm.script(completion_reply(GOOD_REPLY, total_tokens=None))
    result = await propose(llm, store_url, request())
    prompt_chars = len(fake_llm.requests[0].prompt_text())
    assert result.tokens_used >= prompt_chars // 4


@pytest.mark.parametrize(
    "reply, kind, delay",
    [
        (error_reply(429, "slow down", retry_after=2), "LLMRateLimited", timedelta(seconds=2)),
        (error_reply(429, "slow down", retry_after_ms="1500"), "LLMRateLimited", timedelta(seconds=1.5)),
        (error_reply(503, "overloaded"), "LLMUnavailable", None),
        (error_reply(408, "request timeout"), "LLMUnavailable", None),
        (raw_reply("<html>bad gateway page</html>"), "LLMBadResponse", None),
    ],
    ids=["429-retry-after", "429-retry-after-ms", "503", "408", "html-200"],
)
async def test_rate_limits_and_outages_are_retryable(fake_llm, llm, store_url, reply, kind, delay):
    fake_llm.script(reply)
    with pytest.raises(ApplicationError) as caught:
        await propose(llm, store_url, request())
    assert caught.value.type == kind
    assert not caught.value.non_retryable
    assert caught.value.next_retry_delay == delay
    assert len(fake_llm.requests) == 1, "the client must not retry by itself"


async def test_a_timeout_is_retryable(fake_llm, llm, store_url):
    endpoint = dataclasses.replace(llm, timeout_s=0.5)
    slow = completion_reply(GOOD_REPLY)
    slow.delay_s = 2.0
    fake_llm.script(slow)
    with pytest.raises(ApplicationError) as caught:
        await propose(endpoint, store_url, request())
    assert caught.value.type == "LLMTimeout" and not caught.value.non_retryable
    assert len(fake_llm.requests) == 1


@pytest.mark.parametrize("status", [400, 404, 422])
async def test_other_client_errors_are_not_retried(fake_llm, llm, store_url, status):
    fake_llm.script(error_reply(status, "context length exceeded"))
    with pytest.raises(ApplicationError) as caught:
        await propose(llm, store_url, request())
    assert caught.value.non_retryable and caught.value.type == "LLMRequestRejected"
    assert f"answered HTTP {status}" in caught.value.message and "context length exceeded" in caught.value.message


async def test_a_failure_after_some_candidates_keeps_them(fake_llm, llm, store_url):
    fake_llm.script(completion_reply(GOOD_REPLY, total_tokens=100), error_reply(429, retry_after=5))
    result = await propose(llm, store_url, request(count=3))
    assert len(fake_llm.requests) == 2
    assert len(result.candidates) == 1 and result.tokens_used == 100
    assert "candidate 2 of 3" in result.errors[0] and "HTTP 429" in result.errors[0]


async def test_the_run_config_overrides_the_worker_settings(fake_llm, llm, store_url):
    endpoint = dataclasses.replace(llm, base_url=None)
    config = ProposerConfig(kind="llm", model="other-model", temperature=1.1, base_url=fake_llm.base_url)
    fake_llm.script(completion_reply(GOOD_REPLY))
    await propose(endpoint, store_url, request(proposer=config))
    assert fake_llm.requests[0].body["model"] == "other-model"
    assert fake_llm.requests[0].body["temperature"] == 1.1


async def test_without_an_endpoint_the_proposal_fails_for_good(llm, store_url):
    endpoint = dataclasses.replace(llm, base_url=None)
    with pytest.raises(ApplicationError) as caught:
        await propose(endpoint, store_url, request())
    assert caught.value.non_retryable and "MARATHON_LLM_BASE_URL" in caught.value.message


async def test_the_api_key_never_reaches_logs_or_errors(fake_llm, llm, store_url, caplog):
    caplog.set_level(logging.DEBUG)
    fake_llm.script(
        completion_reply(GOOD_REPLY),
        error_reply(401, f"Incorrect API key provided: {FAKE_KEY}"),
        error_reply(429, f"key {FAKE_KEY} is rate limited", retry_after=1),
    )
    await propose(llm, store_url, request())
    errors = []
    for _ in range(2):
        with pytest.raises(ApplicationError) as caught:
            await propose(llm, store_url, request())
        errors.append(caught.value)
    assert all(r.headers["authorization"] == f"Bearer {FAKE_KEY}" for r in fake_llm.requests)
    assert "Incorrect API key provided: [redacted]" in errors[0].message
    for error in errors:
        assert FAKE_KEY not in str(error) and FAKE_KEY not in repr(error.details)
        assert error.__cause__ is None
    assert "HTTP Request: POST" in caplog.text or "LLM fake-model" in caplog.text
    assert FAKE_KEY not in caplog.text


async def test_a_slow_call_heartbeats_while_it_waits(fake_llm, llm, store_url):
    slow = completion_reply(GOOD_REPLY)
    slow.delay_s = 0.6
    fake_llm.script(slow)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(ActivityEnvironment.default_info(), heartbeat_timeout=timedelta(seconds=0.2))
    beats = []
    env.on_heartbeat = lambda *details: beats.append(details)
    result = await env.run(ProposeActivities(database_url=store_url, llm=llm).propose, request())
    assert len(result.candidates) == 1
    assert len(beats) >= 2


async def test_an_unreachable_endpoint_is_retryable_and_its_credentials_stay_hidden(llm, store_url):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = dataclasses.replace(llm, base_url=f"http://user:hunter2@127.0.0.1:{port}/v1?token=abc")
    with pytest.raises(ApplicationError) as caught:
        await propose(endpoint, store_url, request())
    assert caught.value.type == "LLMUnreachable" and not caught.value.non_retryable
    assert f"http://127.0.0.1:{port}/v1 is unreachable" in caught.value.message
    assert "hunter2" not in caught.value.message and "token=abc" not in caught.value.message


async def test_the_server_can_forbid_a_retry(fake_llm, llm, store_url):
    fake_llm.script(error_reply(500, "deterministic failure", x_should_retry="false"))
    with pytest.raises(ApplicationError) as caught:
        await propose(llm, store_url, request())
    assert caught.value.non_retryable and "HTTP 500" in caught.value.message
