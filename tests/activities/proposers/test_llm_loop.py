"""The real optimization workflow with the LLM proposer against the fake server: every prompt
opens with the goal, a malformed reply becomes a recorded proposal_error with its message and
comes back as feedback in the next prompt, and a 429 is retried by Temporal. Only the
evaluator is a same-name fake (no judge needed for this)."""

from __future__ import annotations

import uuid

from fakes.openai_server import completion_reply, error_reply
from proposer_requests import GOOD_REPLY, INTENT
from proposer_toy_problem import OBJECT_PATH as TOY_PROBLEM
from temporalio import activity

from marathon.local_loop import local_loop
from store.db import session_scope
from store.repository import list_attempts
from workflows.types import Budget, EvaluateInput, EvaluateResult, Goal, OptimizeInput, ProposerConfig

MALFORMED = "Strategy: bigger tiles\nI would raise BLOCK to 256 but I will not write the code."


@activity.defn(name="evaluate")
async def evaluate(request: EvaluateInput) -> EvaluateResult:
    return EvaluateResult(status="ok", speedup=1.2, timing_kind="interpreter", gpu_seconds=0.1)


async def test_an_llm_run_records_malformed_replies_and_feeds_them_back(temporal_env, fake_llm, llm_settings, store_url):
    fake_llm.script(
        completion_reply(GOOD_REPLY, total_tokens=100),
        completion_reply(MALFORMED, total_tokens=50),
        error_reply(429, "rate limited", retry_after=1),
        completion_reply(GOOD_REPLY, total_tokens=100),
        completion_reply(GOOD_REPLY.replace("4096", "8192"), total_tokens=100),
        completion_reply(GOOD_REPLY, total_tokens=100),
        completion_reply(GOOD_REPLY.replace("4096", "8192"), total_tokens=100),
    )
    queue, evaluate_queue = f"cpu-{uuid.uuid4().hex[:8]}", f"eval-{uuid.uuid4().hex[:8]}"
    run_id = f"run-llm-{uuid.uuid4().hex[:8]}"
    client = temporal_env.client
    async with local_loop(
        client, llm_settings, task_queue=queue, evaluate_queue=evaluate_queue,
        database_url=store_url, evaluate_activities=[evaluate],
    ) as loop:
        result = await loop.execute(
            OptimizeInput(
                run_id=run_id,
                problem=TOY_PROBLEM,
                goal=Goal(target=10.0, intent=INTENT),
                # Three iterations: the steady loop proposes iteration 2 while iteration 1 is judged,
                # so the malformed reply's feedback reaches iteration 3's proposal.
                budget=Budget(iterations=3),
                proposer=ProposerConfig(kind="llm"),
                candidates_per_iteration=2,
                evaluate_task_queue=evaluate_queue,
                gpu_wait_s=60.0,
                confirm_champions=False,
            )
        )
    assert result.iterations == 3 and result.stop_reason == "budget_iterations"
    assert len(fake_llm.requests) == 7 and fake_llm.pending() == 0
    for sent in fake_llm.requests:
        assert sent.messages()[0]["content"].startswith("# Goal\nReach 10x geomean speedup")
        assert INTENT in sent.messages()[0]["content"]
    with session_scope(store_url) as session:
        attempts, total = list_attempts(session, run_id, limit=100)
        assert total == 6
        statuses = [(a.iteration, a.index, a.status) for a in attempts]
        assert statuses[1][2] == "proposal_error", statuses
        assert "no fenced ```python code block" in attempts[1].message
        assert attempts[1].strategy == "bigger tiles"
        assert all(a.status == "ok" for i, a in enumerate(attempts) if i != 1)
    third_iteration = fake_llm.requests[-2].prompt_text()
    feedback = third_iteration[third_iteration.index("# Feedback on the last attempts"):]
    assert "no fenced ```python code block" in feedback
