"""Replay recorded histories against today's workflow code, so a change that would break
running workflows (a non-deterministic change) fails CI instead of hour 23 of a run.

The histories come from ``record_histories.py``; see there for when to re-record.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from marathon.workers import workflow_runner
from tests.workflows.mutated_workflow import SkipsTheStoreSync
from workflows.optimize import OptimizeKernelWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, path.read_text())


def patches(path: Path) -> set[str]:
    """The ids of the ``workflow.patched`` markers a history recorded."""
    found = set()
    for event in json.loads(path.read_text())["events"]:
        details = event.get("markerRecordedEventAttributes", {}).get("details", {})
        for payload in details.get("patch-data", {}).get("payloads", []):
            found.add(json.loads(base64.b64decode(payload["data"]))["id"])
    return found


def test_histories_are_there():
    # A run across two continue-as-new boundaries: three segments, for each loop.
    assert len(HISTORIES) >= 6


def test_both_loops_are_recorded():
    """The ``optimize-*`` histories ran the lock-step loop (no steady-loop marker), the ``steady-*``
    ones the steady loop: replaying both keeps old runs and new runs working."""
    marked = {path.stem: "steady-loop" in patches(path) for path in HISTORIES}
    assert not any(marked[name] for name in marked if name.startswith("optimize-")), marked
    steady = [name for name in marked if name.startswith("steady-")]
    assert steady and all(marked[name] for name in steady), marked


@pytest.mark.parametrize("path", HISTORIES, ids=[path.stem for path in HISTORIES])
async def test_recorded_history_replays(path):
    replayer = Replayer(workflows=[OptimizeKernelWorkflow], workflow_runner=workflow_runner())
    await replayer.replay_workflow(load(path))


async def test_a_non_deterministic_change_fails_replay():
    replayer = Replayer(workflows=[SkipsTheStoreSync], workflow_runner=workflow_runner())
    with pytest.raises(workflow.NondeterminismError):
        await replayer.replay_workflow(load(HISTORIES[0]))
