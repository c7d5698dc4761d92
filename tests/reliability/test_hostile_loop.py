"""Hostile candidates on a live loop: the LLM proposer (against the fake OpenAI server) sends
back kernels that hang, segfault, run out of memory, flood stdout, look for secrets, open a
socket, write outside their sandbox or fork, and then one honest kernel. Real CPU worker, real
evaluation worker in CPU mode with the real judge, real store (SQLite), real dev server.

The worker is in this process: if any attack escaped the judge's child processes (a segfault,
an OOM kill, a flood of output) pytest itself would die. The test asserts that each attack is
recorded with a contained status and a readable message, that no secret of the worker's
environment reaches a stored message or report, that nothing was written outside the sandbox,
that no judge child is left behind, and that the run completes with the honest kernel best.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from pydantic import SecretStr

from marathon.local_loop import local_loop
from store.artifacts import get_text
from store.db import dispose_engine, session_scope, upgrade
from store.repository import get_run, list_attempts
from tests.cli.stack import parent_of
from tests.fakes.openai_server import FakeOpenAIServer, completion_reply
from tests.loop_fixtures import loop_settings, unique_queue
from tests.reliability.hostile import BODIES, reply, source
from workflows.types import Budget, Goal, OptimizeInput, ProposerConfig

TOY = "tests.judge.toy:PROBLEM"
LLM_KEY = "sk-reliability-llm-3f9a1c7e5d2b4a6f"
AWS_SECRET = "aws-reliability-9b8c7d6e5f4a3b2c1d0e"
# A hang costs this much; the honest toy kernel needs about 7 s on an idle 2-core box, and
# several times that on a loaded one.
EVALUATE_TIMEOUT_S = 40.0
# A flood may be accepted (printing is no crime) but what is kept of it is bounded.
CONTAINED = {"timeout", "crashed", "runtime_error", "forbidden", "compile_error", "incorrect", "suspicious"}
MAY_PASS = {"print_flood"}


def descends_from_us(pid: int) -> bool:
    me = os.getpid()
    while pid > 1:
        if pid == me:
            return True
        pid = parent_of(pid) or 0
    return False


def judge_children() -> list[str]:
    """Command lines of live judge children (sandbox or referee) of this process. (Other
    sessions on the machine may be judging too: only our descendants count. A fork that
    escaped to init would not be seen here; the fork attack is refused before it runs.)"""
    root = str(Path(__file__).resolve().parents[2])
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not descends_from_us(int(entry.name)):
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if root in cmdline and ("sandbox" in cmdline or "referee" in cmdline) and " -c " in cmdline:
            found.append(f"{entry.name}: {cmdline[:120]}")
    return found


async def test_hostile_replies_are_contained_and_the_run_completes(temporal_client, tmp_path, monkeypatch):
    monkeypatch.setenv("MARATHON_LLM_API_KEY", LLM_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    outside = tmp_path / "outside" / "escaped.bin"
    outside.parent.mkdir()
    names = list(BODIES)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    queue, evaluate_queue = unique_queue("hostile"), unique_queue("hostile-eval")
    run_id = f"hostile-{uuid.uuid4().hex[:8]}"
    children_before = set(judge_children())
    with FakeOpenAIServer() as llm:
        llm.script(*(completion_reply(reply(name, str(outside))) for name in names + ["honest"]))
        settings = loop_settings(
            home=tmp_path, llm_base_url=llm.base_url, llm_model="fake-model",
            llm_api_key=SecretStr(LLM_KEY), llm_timeout_s=10.0,
        )
        try:
            async with local_loop(
                temporal_client, settings, task_queue=queue, evaluate_queue=evaluate_queue, device="cpu",
                database_url=url,
            ) as loop:
                result = await loop.execute(
                    OptimizeInput(
                        run_id=run_id,
                        problem=TOY,
                        goal=Goal(target=1000.0),
                        budget=Budget(iterations=len(names) + 1),
                        proposer=ProposerConfig(kind="llm"),
                        candidates_per_iteration=1,
                        device="cpu",
                        evaluate_task_queue=evaluate_queue,
                        gpu_wait_s=120.0,
                        evaluate_timeout_s=EVALUATE_TIMEOUT_S,
                    )
                )
                cpu, gpu = loop.cpu_worker, loop.evaluation_worker
                assert gpu.is_running and cpu.is_running  # the evaluation worker survived every attack
            with session_scope(url) as session:
                run = get_run(session, run_id)
                attempts, total = list_attempts(session, run_id, limit=100)
                rows = [(a.iteration, a.index, a.status, a.message or "", a.source_sha, a.is_best) for a in attempts]
                reports = {a.iteration - 1: get_text(session, a.report_sha) for a in attempts if a.report_sha}
        finally:
            dispose_engine(url)
        assert llm.pending() == 0, "every scripted reply was asked for"
        prompts = "\n".join(request.prompt_text() for request in llm.requests)

    assert (result.stop_reason, result.iterations) == ("budget_iterations", len(names) + 1)
    assert run.status == "completed" and total == len(names) + 1
    # Iterations count from 1; one candidate each.
    assert sorted((r[0], r[1]) for r in rows) == [(i, 0) for i in range(1, len(names) + 2)]
    by_iteration = {r[0] - 1: r for r in rows}
    for iteration, name in enumerate(names):
        _, _, status, message, sha, is_best = by_iteration[iteration]
        allowed = CONTAINED | ({"ok"} if name in MAY_PASS else set())
        assert status in allowed, (name, status, message)
        assert message.strip() and len(message) <= 4000, (name, message)
        assert not is_best, name
    expected = {"hang": "timeout", "segfault_wild_load": "crashed", "oom": "runtime_error"}
    for name, status in expected.items():
        assert by_iteration[names.index(name)][2] == status, (name, by_iteration[names.index(name)])
    assert "SIGSEGV" in by_iteration[names.index("segfault_wild_load")][3]
    assert "memory" in by_iteration[names.index("oom")][3]
    flood_report = reports.get(names.index("print_flood"), "")
    assert len(flood_report) < 200_000, "the report keeps only a bounded excerpt of a flood"
    honest = by_iteration[len(names)]
    assert honest[2] == "ok" and honest[5], honest
    assert result.best is not None and result.best.source_sha == honest[4]
    stored = "\n".join(r[3] for r in rows) + "\n".join(reports.values()) + prompts
    for secret in (LLM_KEY, AWS_SECRET):
        assert secret not in stored, "a secret of the worker's environment leaked into the store or a prompt"
    assert not outside.exists(), "a candidate wrote outside its sandbox"
    assert set(judge_children()) <= children_before, "a judge child (or a fork of it) outlived its evaluation"
    assert all(source(n, str(outside)) for n in names)  # the corpus renders with the probe path
