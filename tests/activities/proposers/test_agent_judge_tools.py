"""The agent's judge tools run the loop's own judge (same scan, sandbox and verdicts) on the CPU:
honest and adversarial corpus files get through a tool exactly the verdict the corpus requires of
the judge, nothing secret reaches an answer, and the GPU-only tools say they are not available on
this worker."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from temporalio.testing import ActivityEnvironment

from activities.agent import messages as stored
from activities.agent.judge_tools import AgentJudgeTools
from tests.judge.corpus import FAKE_SECRET, RUNTIME_CASES, TOY
from workflows.agent_types import AgentToolCall, AgentToolInput

CASES = {case.name: case for case in RUNTIME_CASES}
# (tool, corpus file): an honest file and adversarial ones the static scan is part of judging.
JUDGED = [("run", "honest_cumsum"), ("run", "nan_output"), ("compile", "float_literal_tensor"),
          ("run", "hidden_getattr")]


def tool_input(store_url: str, name: str, arguments: str) -> AgentToolInput:
    message = {"role": "assistant", "content": "",
               "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}]}
    key = stored.store_message(store_url, message, None)
    return AgentToolInput(run_id="run-tools", problem=TOY, message_sha=key,
                          call=AgentToolCall(position=0, call_id="call_1", name=name))


def answer_text(store_url: str, key: str) -> str:
    return stored.load_messages(store_url, [key])[0]["content"]


@pytest.fixture
def secrets_in_environment():
    saved = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = FAKE_SECRET
    yield
    if saved is None:
        os.environ.pop("OPENAI_API_KEY", None)
    else:
        os.environ["OPENAI_API_KEY"] = saved


async def test_judge_tools_give_the_corpus_verdicts(store_url, secrets_in_environment):
    tools = AgentJudgeTools(store_url, device="cpu")
    env = ActivityEnvironment()
    inputs = [tool_input(store_url, name, json.dumps({"source": CASES[case].source})) for name, case in JUDGED]
    results = await asyncio.gather(*[env.run(tools.judge_tool, request) for request in inputs])
    for (name, case), result in zip(JUDGED, results):
        text = answer_text(store_url, result.message_sha)
        expected = CASES[case].status
        assert text.startswith(f"judge verdict: {expected}"), (case, text)
        assert result.ok == (expected == "ok")
        assert FAKE_SECRET not in text and "fingerprint" not in text and "isolation" not in text
        assert result.seconds > 0 and result.gpu_busy_s is None  # no GPU to measure on this worker
    honest = answer_text(store_url, results[0].message_sha)
    assert "error per output" in honest and "(tolerance 1e-05)" in honest and "causal0" in honest
    assert "sm_90 compile statistics" in answer_text(store_url, results[2].message_sha)


@pytest.mark.parametrize("name", ["time", "ncu"])
async def test_gpu_only_tools_are_not_available_on_a_cpu_worker(store_url, name):
    tools = AgentJudgeTools(store_url, device="cpu")
    result = await ActivityEnvironment().run(tools.judge_tool, tool_input(store_url, name, '{"source": "x = 1"}'))
    text = answer_text(store_url, result.message_sha)
    assert not result.ok and text.startswith("error: not available on this worker")
    assert result.seconds < 5  # answered without a judgement


async def test_unusable_arguments_are_answered_without_judging(store_url):
    tools = AgentJudgeTools(store_url, device="cpu")
    result = await ActivityEnvironment().run(tools.judge_tool, tool_input(store_url, "run", '{"src": 1}'))
    assert not result.ok
    assert answer_text(store_url, result.message_sha) == "error: run needs source (non-empty text)"
