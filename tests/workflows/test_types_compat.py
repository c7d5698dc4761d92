"""Fields deleted from the workflow's dataclasses (never read: ``Candidate.parent_sha``,
``EvaluateResult.device``, ``RunState.seed_sha``) still arrive in the histories of runs started
before: Temporal's data converter must ignore keys a dataclass does not have, or those runs could
not be replayed. Checked on the real payloads of the recorded histories, with the real converter."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter

from workflows.types import Candidate, EvaluateResult, OptimizeInput, ProposeResult, RunState

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))
DELETED = {"parent_sha", "device", "seed_sha"}
RESULT_TYPES = {"propose": ProposeResult, "evaluate": EvaluateResult}


def decode(payload: Payload, type_hint):
    return DataConverter.default.payload_converter.from_payloads([payload], [type_hint])[0]


def old_payloads():
    """(type, payload, its JSON) for every run input and propose/evaluate result in the histories."""
    for path in HISTORIES:
        history = WorkflowHistory.from_json(path.stem, path.read_text())
        activity_types = {}
        for event in history.events:
            if event.HasField("workflow_execution_started_event_attributes"):
                payload = event.workflow_execution_started_event_attributes.input.payloads[0]
                yield OptimizeInput, payload
            elif event.HasField("activity_task_scheduled_event_attributes"):
                activity_types[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
            elif event.HasField("activity_task_completed_event_attributes"):
                attributes = event.activity_task_completed_event_attributes
                result_type = RESULT_TYPES.get(activity_types[attributes.scheduled_event_id])
                if result_type is not None:
                    yield result_type, attributes.result.payloads[0]


def keys_in(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {key for item in value.values() for key in keys_in(item)}
    if isinstance(value, list):
        return {key for item in value for key in keys_in(item)}
    return set()


def test_old_payloads_with_deleted_fields_decode_into_todays_types():
    seen: set[str] = set()
    decoded = 0
    for type_hint, payload in old_payloads():
        data = json.loads(payload.data)
        # A run input's own "device" is a field that stays: look only at the state it carries.
        old = keys_in(data.get("state")) if type_hint is OptimizeInput else keys_in(data)
        seen |= {(type_hint.__name__, key) for key in old & DELETED}
        value = decode(payload, type_hint)
        assert isinstance(value, type_hint)
        decoded += 1
    assert seen == {
        ("ProposeResult", "parent_sha"),
        ("EvaluateResult", "device"),
        ("OptimizeInput", "seed_sha"),
    }
    assert decoded > 20


def test_unknown_keys_are_ignored_and_the_rest_is_kept():
    payload = Payload(
        metadata={"encoding": b"json/plain"},
        data=json.dumps(
            {"index": 2, "source_sha": "ab" * 32, "strategy": "BLOCK=64", "parent_sha": "cd" * 32, "error": None}
        ).encode(),
    )
    candidate = decode(payload, Candidate)
    assert candidate == Candidate(index=2, source_sha="ab" * 32, strategy="BLOCK=64")
    assert not hasattr(candidate, "parent_sha")
    state = decode(
        Payload(metadata={"encoding": b"json/plain"}, data=b'{"iteration": 7, "seed_sha": null, "paused": true}'),
        RunState,
    )
    assert state.iteration == 7 and state.paused and not hasattr(state, "seed_sha")
