"""Statuses have one owner each: ``workflows.types`` for runs, ``kernels.judge.report`` for the
judge's verdicts. These tests tie every other place that names them to those owners: the API's
schema, the store's columns and writer, the workflow's own transitions and the CLI."""

from __future__ import annotations

import ast
import inspect

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.record import Recorder
from api.main import create_app
from kernels.judge.report import STATUSES as JUDGE_REPORT_STATUSES
from marathon.settings import Settings
from store.db import session_scope
from store.models import Attempt, Run
from store.repository import list_runs
from tests.store.conftest import database_url, empty_database_url  # noqa: F401  (fixtures)
from workflows import optimize
from workflows.types import (
    ATTEMPT_STATUSES,
    FINISHED_RUN_STATUSES,
    JUDGE_STATUSES,
    RUN_STATUSES,
    Budget,
    ProposerConfig,
    RunCreateInfo,
    RunProgressInput,
)


def test_the_workflow_knows_the_judge_statuses_the_judge_reports():
    # workflows/ may not import the judge (it would load its runner), so the list is copied: keep it equal.
    assert JUDGE_STATUSES == JUDGE_REPORT_STATUSES
    assert ATTEMPT_STATUSES == (*JUDGE_REPORT_STATUSES, "proposal_error")


def test_the_store_columns_hold_every_status():
    assert max(len(status) for status in RUN_STATUSES) <= Run.__table__.c.status.type.length
    assert max(len(status) for status in ATTEMPT_STATUSES) <= Attempt.__table__.c.status.type.length
    assert Run.__table__.c.status.default.arg == RUN_STATUSES[0] == "running"


def statuses_the_workflow_sets() -> set[str]:
    """Every string the workflow assigns to its run status (``self._status = ...``, and the
    ``status`` local of its store sync), read from its source."""
    tree = ast.parse(inspect.getsource(optimize))
    found: set[str] = set()

    def is_status(target: ast.expr) -> bool:
        return (isinstance(target, ast.Attribute) and target.attr == "_status") or (
            isinstance(target, ast.Name) and target.id == "status"
        )

    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = [(target, node.value)]
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                pairs = list(zip(target.elts, node.value.elts))
            for named, value in pairs:
                if is_status(named):
                    strings = [n.value for n in ast.walk(value) if isinstance(n, ast.Constant)]
                    found |= {text for text in strings if isinstance(text, str)}
    return found


def test_the_workflow_sets_exactly_the_run_statuses():
    assert statuses_the_workflow_sets() == set(RUN_STATUSES)
    assert set(FINISHED_RUN_STATUSES) < set(RUN_STATUSES)


def test_the_api_filters_on_the_run_statuses(tmp_path):
    settings = Settings(home=tmp_path, database_url=f"sqlite:///{tmp_path / 'api.db'}")
    schema = create_app(settings).openapi()
    parameters = schema["paths"]["/runs"]["get"]["parameters"]
    status = next(p for p in parameters if p["name"] == "status")
    enum = next(option["enum"] for option in status["schema"]["anyOf"] if "enum" in option)
    assert enum == list(RUN_STATUSES)


def test_which_runs_are_over_is_said_once():
    """The CLI, the API and the store read FINISHED_RUN_STATUSES; none keeps its own copy or alias."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    copies = []
    for folder in ("api", "marathon", "store", "activities", "workflows"):
        for path in (root / folder).rglob("*.py"):
            text = path.read_text()
            if path.name == "types.py" and path.parent.name == "workflows":
                continue
            if re.search(r"^\w+\s*=\s*FINISHED_RUN_STATUSES\b", text, re.M) or re.search(
                r"[\(\[{]\s*[\"']completed[\"'],\s*[\"']stopped[\"'],\s*[\"']failed[\"']", text
            ):
                copies.append(str(path.relative_to(root)))
    assert copies == []


@pytest.mark.parametrize("status", RUN_STATUSES)
async def test_the_store_keeps_each_run_status_and_refuses_others(database_url, status):  # noqa: F811
    recorder, env = Recorder(database_url), ActivityEnvironment()
    create = RunCreateInfo(
        problem="kda", budget=Budget(), proposer=ProposerConfig(), candidates_per_iteration=1, workflow_id="wf"
    )
    await env.run(recorder.record_run, RunProgressInput(run_id="r", status=status, create=create))
    with session_scope(database_url) as session:
        runs, total = list_runs(session, status=status)
        assert total == 1 and runs[0].status == status
    with pytest.raises(ApplicationError, match="run status must be one of running, paused, completed"):
        await env.run(recorder.record_run, RunProgressInput(run_id="r", status=status.upper()))
