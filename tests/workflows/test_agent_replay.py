"""The agent proposer's recorded histories (``record_agent_histories.py``) replay against today's
code, and they hold the conversation by key only: no kernel source, prompt or tool answer is in
an event's payloads."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from marathon.workers import workflow_runner
from tests.workflows.record_agent_histories import SOURCE
from workflows.agent import AgentConversationWorkflow
from workflows.optimize import OptimizeKernelWorkflow

HISTORIES = sorted((Path(__file__).parent / "agent_histories").glob("*.json"))


def payload_texts(node) -> list[str]:
    """Every payload's data in a history's JSON, decoded."""
    found = []
    if isinstance(node, dict):
        if "metadata" in node and "data" in node and isinstance(node["data"], str):
            found.append(base64.b64decode(node["data"]).decode("utf-8", "replace"))
        for value in node.values():
            found += payload_texts(value)
    elif isinstance(node, list):
        for value in node:
            found += payload_texts(value)
    return found


def test_both_histories_are_there():
    assert [path.stem for path in HISTORIES] == ["agent-conversation", "agent-run"]


def original_id(path: Path) -> str:
    """The workflow id the history was recorded under (a child's id derives from its parent's)."""
    conversation = json.loads((path.parent / "agent-conversation.json").read_text())
    started = conversation["events"][0]["workflowExecutionStartedEventAttributes"]
    parent = started["parentWorkflowExecution"]["workflowId"]
    return parent if path.stem == "agent-run" else f"{parent}-agent-1-0"


@pytest.mark.parametrize("path", HISTORIES, ids=[path.stem for path in HISTORIES])
async def test_recorded_agent_history_replays(path):
    replayer = Replayer(workflows=[OptimizeKernelWorkflow, AgentConversationWorkflow], workflow_runner=workflow_runner())
    await replayer.replay_workflow(WorkflowHistory.from_json(original_id(path), path.read_text()))


def test_the_conversation_travels_by_key():
    texts = payload_texts(json.loads((Path(__file__).parent / "agent_histories" / "agent-conversation.json").read_text()))
    assert any('"read_problem"' in text for text in texts)  # the steps are there, by name and summary
    assert not any(SOURCE.strip() in text or "# Reference" in text or "# Rules" in text for text in texts)
    assert max(len(text) for text in texts) < 4000
