"""The API under a third-party fuzzer: Schemathesis with every check (``--checks all``) and every
phase, stateful included (it follows the schema's links from a created run to the routes that
read and steer it), against a real stack (tests/reliability/fuzz_stack.py): the real API on a real
SQLite store, the real Temporal dev server, the API tests' stand-in workflow.

Every answer must match the schema (status codes, bodies, headers, content types), no answer may
be a 5xx, invalid requests are refused and valid ones accepted. Afterwards every run row in the
store belongs to a workflow Temporal knows: nothing half-created.

Bounded for CI by ``MARATHON_FUZZ_EXAMPLES`` (per operation and phase, default 15) and
``MARATHON_FUZZ_MAX_TIME`` (seconds, default 120); raise both for a long run by hand
(RELIABILITY.md has the command and its figures).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability.fuzz_stack import fuzz_stack

EXAMPLES = int(os.environ.get("MARATHON_FUZZ_EXAMPLES", "15"))
MAX_TIME_S = int(os.environ.get("MARATHON_FUZZ_MAX_TIME", "120"))
SEED = int(os.environ.get("MARATHON_FUZZ_SEED", "20261205"))
WORKERS = int(os.environ.get("MARATHON_FUZZ_WORKERS", "1"))
PHASES = "examples,coverage,fuzzing,stateful"
CONFIG = Path(__file__).with_name("schemathesis.toml")


def schemathesis_command(schema_url: str, token: str, report: str) -> list[str]:
    executable = shutil.which("schemathesis") or shutil.which("st")
    if executable is None:
        pytest.skip("the schemathesis CLI is not installed (it comes with the test extra)")
    return [
        executable, "--config-file", str(CONFIG), "run", schema_url,
        "--checks", "all",
        "--phases", PHASES,
        "--max-examples", str(EXAMPLES),
        "--max-time", str(MAX_TIME_S),
        "--seed", str(SEED),
        "--workers", str(WORKERS),
        "--header", f"Authorization: Bearer {token}",
        "--request-timeout", "30",
        "--suppress-health-check", "all",
        "--report", "ndjson", "--report-ndjson-path", report,
        "--no-color",
    ]


def cases_sent(report: str) -> int:
    """Requests the fuzzer sent, counted from its event log."""
    sent = 0
    with open(report, encoding="utf-8") as events:
        for line in events:
            sent += line.count('"ScenarioFinished"') and json.loads(line).get("ScenarioFinished", {}).get(
                "recorder", {}).get("cases", {}).__len__()
    return sent


@pytest.mark.slow
@pytest.mark.timeout(MAX_TIME_S + 300)
def test_schemathesis_with_all_checks_finds_nothing(temporal_server, tmp_path):
    report = str(tmp_path / "events.ndjson")
    with fuzz_stack(temporal_server.address, tmp_path) as (api, token, url):
        command = schemathesis_command(f"{api.base_url}/openapi.json", token, report)
        # In the test's directory: the CLI keeps a cache (.schemathesis/) where it runs.
        done = subprocess.run(command, capture_output=True, text=True, timeout=MAX_TIME_S + 120, cwd=tmp_path,
                              env={**os.environ, "SCHEMATHESIS_HOOKS": "", "PYTHONIOENCODING": "utf-8"})
        stored = _stored_run_ids(url)
    output = done.stdout + done.stderr
    (tmp_path / "schemathesis.txt").write_text(output, encoding="utf-8")
    sys.stdout.write(output[-6000:] + f"\n(all of it in {tmp_path / 'schemathesis.txt'})\n")
    sent = cases_sent(report)
    print(f"\nschemathesis: {sent} cases sent, exit code {done.returncode}")
    assert done.returncode == 0, output[-6000:]
    assert sent >= 100, sent
    workflows = asyncio.run(_workflow_ids(temporal_server.address, stored))
    assert workflows == set(stored), "a stored run without its workflow"


def _stored_run_ids(url: str) -> list[str]:
    from sqlalchemy import text

    from store.db import session_scope

    with session_scope(url) as session:
        return [row[0] for row in session.execute(text("SELECT id FROM runs"))]


async def _workflow_ids(address: str, run_ids: list[str]) -> set[str]:
    from temporalio.client import Client, WorkflowExecutionStatus
    from temporalio.service import RPCError

    client = await Client.connect(address)
    found = set()
    for run_id in run_ids:
        handle = client.get_workflow_handle(run_id)
        try:
            description = await handle.describe()
        except RPCError:
            continue
        found.add(run_id)
        if description.status == WorkflowExecutionStatus.RUNNING:
            await handle.terminate(reason="fuzz test clean-up")
    return found
