"""Every LLM-written attempt keeps what the model was asked and answered: the real workflow
with the LLM proposer against the fake OpenAI-compatible server stores one transcript per
candidate, by reference (attempts.llm_sha -> an artifact), with the API key redacted wherever it
appeared (in the prompt through the goal's intent, in the reply) and long texts clipped."""

from __future__ import annotations

import json
import uuid

from fakes.openai_server import completion_reply
from proposer_requests import FAKE_KEY, GOOD_REPLY
from proposer_toy_problem import OBJECT_PATH as TOY_PROBLEM
from temporalio import activity

from activities.proposers.llm import TRANSCRIPT_TEXT_LIMIT, scrub, transcript
from marathon.local_loop import local_loop
from store.artifacts import get_text
from store.db import session_scope
from store.repository import list_attempts
from workflows.types import Budget, EvaluateInput, EvaluateResult, Goal, OptimizeInput, ProposerConfig


@activity.defn(name="evaluate")
async def evaluate(request: EvaluateInput) -> EvaluateResult:
    return EvaluateResult(status="ok", speedup=1.1, timing_kind="interpreter", gpu_seconds=0.1)


async def test_each_llm_attempt_stores_its_prompt_and_reply_redacted(temporal_env, fake_llm, llm_settings, store_url):
    leaky_reply = GOOD_REPLY.replace("Strategy: ", f"Strategy: (my key is {FAKE_KEY}) ")
    fake_llm.script(completion_reply(leaky_reply, total_tokens=100), completion_reply(GOOD_REPLY, total_tokens=90))
    queue, evaluate_queue = f"cpu-{uuid.uuid4().hex[:8]}", f"eval-{uuid.uuid4().hex[:8]}"
    run_id = f"run-llm-{uuid.uuid4().hex[:8]}"
    client = temporal_env.client
    async with local_loop(
        client, llm_settings, task_queue=queue, evaluate_queue=evaluate_queue,
        database_url=store_url, evaluate_activities=[evaluate],
    ) as loop:
        await loop.execute(
            OptimizeInput(
                run_id=run_id,
                problem=TOY_PROBLEM,
                # A person pasted the key into the goal: it reaches the prompt, not the store.
                goal=Goal(target=10.0, intent=f"go fast, key {FAKE_KEY}"),
                budget=Budget(iterations=1),
                proposer=ProposerConfig(kind="llm"),
                candidates_per_iteration=2,
                evaluate_task_queue=evaluate_queue,
                gpu_wait_s=60.0,
                confirm_champions=False,
            )
        )
    assert len(fake_llm.requests) == 2
    assert FAKE_KEY in fake_llm.requests[0].prompt_text()  # what was really sent
    with session_scope(store_url) as session:
        attempts, total = list_attempts(session, run_id, limit=10)
        assert total == 2 and all(a.llm_sha for a in attempts)
        stored = [get_text(session, a.llm_sha) for a in attempts]
    for attempt, text, sent in zip(attempts, stored, fake_llm.requests):
        assert FAKE_KEY not in text
        record = json.loads(text)
        assert record["model"] == "fake-model" and record["tokens"] in (100, 90) and record["clipped"] is False
        assert [m["role"] for m in record["messages"]] == [m["role"] for m in sent.messages()]
        assert record["messages"][0]["content"] == sent.messages()[0]["content"].replace(FAKE_KEY, "[redacted]")
        assert "[redacted]" in record["messages"][0]["content"]
    first = json.loads(stored[0])
    assert first["reply"] == leaky_reply.replace(FAKE_KEY, "[redacted]")


def test_transcripts_are_bounded_and_scrub_key_shapes():
    text = transcript(
        model="m",
        endpoint="http://llm/v1",
        messages=[{"role": "user", "content": "x" * (TRANSCRIPT_TEXT_LIMIT + 500)}],
        reply="Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123 and sk-ABCDEFGHIJKLMNOPQRSTUVWX",
        tokens=7,
        secret=None,
    )
    record = json.loads(text)
    assert record["clipped"] is True
    assert record["messages"][0]["content"].endswith("[... 500 characters clipped]")
    assert "abcdefghijklmnopqrstuvwxyz0123" not in record["reply"] and "sk-ABCD" not in record["reply"]
    assert scrub("use s3cr3t-value here", "s3cr3t-value") == "use [redacted] here"
