"""The record and compact activities, run through ActivityEnvironment against real stores
(SQLite and PostgreSQL, the store's own fixtures) and a real local HTTP server that speaks the
OpenAI chat API."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.compact import Compactor
from activities.config import LLMEndpoint
from activities.record import Recorder
from store.db import session_scope
from store.repository import get_run, list_attempts
from tests.fakes.openai_server import FakeOpenAIServer, completion_reply, error_reply
from tests.store.conftest import database_url, empty_database_url  # noqa: F401  (fixtures)
from workflows import notebook as nb
from workflows.types import (
    Budget,
    Candidate,
    CompactInput,
    EvaluateResult,
    Goal,
    Notebook,
    ProposerConfig,
    RecordInput,
    RunCreateInfo,
    RunProgressInput,
)

COMPACT_KEY = "sk-compact-0123456789abcdef"


def create_info() -> RunCreateInfo:
    return RunCreateInfo(
        problem="kda", budget=Budget(), proposer=ProposerConfig(), candidates_per_iteration=2, workflow_id="wf-1"
    )


async def test_record_run_creates_then_updates_the_run(database_url):
    recorder = Recorder(database_url)
    env = ActivityEnvironment()
    with pytest.raises(ApplicationError, match="run r1 is not in the store") as missing:
        await env.run(recorder.record_run, RunProgressInput(run_id="r1", status="running"))
    assert missing.value.non_retryable
    first = await env.run(
        recorder.record_run, RunProgressInput(run_id="r1", status="running", goal=Goal(target=3.0), create=create_info())
    )
    again = await env.run(
        recorder.record_run,
        RunProgressInput(run_id="r1", status="completed", iteration=7, stop_reason="plateau", create=create_info(),
                         budget_used={"iterations": 7.0, "hours": 0.25, "gpu_seconds": 12.5, "tokens": 0.0}),
    )
    assert (first.created, again.created) == (True, False)
    with session_scope(database_url) as session:
        run = get_run(session, "r1")
        assert (run.status, run.iteration, run.stop_reason, run.problem) == ("completed", 7, "plateau", "kda")
        assert run.goal["target"] == 3.0 and run.workflow_id == "wf-1"
        assert run.budget_used == {"iterations": 7.0, "hours": 0.25, "gpu_seconds": 12.5, "tokens": 0.0}


async def test_record_writes_each_attempt_once(database_url):
    recorder = Recorder(database_url)
    env = ActivityEnvironment()
    await env.run(recorder.record_run, RunProgressInput(run_id="r2", status="running", create=create_info()))
    attempt = RecordInput(
        run_id="r2",
        iteration=1,
        index=0,
        candidate=Candidate(index=0, source_sha="f" * 64, strategy="tile 64", knobs={"BT": 64}),
        result=EvaluateResult(status="ok", speedup=1.4, timing_kind="interpreter", gpu_seconds=2.5, report_sha="e" * 64),
        is_best=True,
    )
    first = await env.run(recorder.record, attempt)
    retried = await env.run(recorder.record, attempt)
    assert first.created and not retried.created and first.attempt_id == retried.attempt_id
    with session_scope(database_url) as session:
        attempts, total = list_attempts(session, "r2")
        run = get_run(session, "r2")
        assert total == 1
        assert (attempts[0].strategy, attempts[0].knobs, attempts[0].is_best) == ("tile 64", {"BT": 64}, True)
        assert run.best_speedup == 1.4 and run.iteration == 1


async def test_record_moves_the_runs_progress_and_record_run_never_undoes_it(database_url):
    """The record activity is the workflow's record step: it writes the attempt and, with it, the
    run's iteration and best (a plain attempt moves only the iteration). A record_run carrying the
    workflow's older iteration (it is written before the workflow's state moves) keeps the newer one."""
    recorder = Recorder(database_url)
    env = ActivityEnvironment()
    await env.run(recorder.record_run, RunProgressInput(run_id="r3", status="running", create=create_info()))

    def attempt(iteration: int, speedup: float, is_best: bool) -> RecordInput:
        return RecordInput(
            run_id="r3", iteration=iteration, index=0, is_best=is_best,
            candidate=Candidate(index=0, source_sha="f" * 64, strategy="tile", knobs={"BT": 64}),
            result=EvaluateResult(status="ok", speedup=speedup, timing_kind="interpreter"),
        )

    best = await env.run(recorder.record, attempt(1, 1.5, True))
    await env.run(recorder.record, attempt(2, 1.1, False))
    await env.run(recorder.record_run, RunProgressInput(run_id="r3", status="paused", iteration=1, best_speedup=1.5))
    with session_scope(database_url) as session:
        run = get_run(session, "r3")
        assert (run.iteration, run.best_speedup, run.best_attempt_id, run.status) == (2, 1.5, best.attempt_id, "paused")


async def test_record_writes_the_evaluations_gpu_figures(database_url):
    """wall, share, busy and timing seconds flow from the evaluation's result to the attempt row; a
    result without a wall time (a proposal error) leaves them all null rather than zero."""
    recorder = Recorder(database_url)
    env = ActivityEnvironment()
    await env.run(recorder.record_run, RunProgressInput(run_id="r4", status="running", create=create_info()))
    measured = EvaluateResult(status="ok", speedup=1.2, gpu_seconds=9.0, wall_s=9.5, wall_share_s=7.0,
                              gpu_busy_s=3.25, timing_s=2.0)
    cpu = EvaluateResult(status="incorrect", wall_s=4.0, wall_share_s=4.0, gpu_busy_s=None, timing_s=0.0)
    for index, result in enumerate((measured, cpu, EvaluateResult(status="proposal_error"))):
        await env.run(recorder.record, RecordInput(
            run_id="r4", iteration=1, index=index, result=result,
            candidate=Candidate(index=index, source_sha="f" * 64, strategy="tile"),
        ))
    with session_scope(database_url) as session:
        attempts, _ = list_attempts(session, "r4")
        assert [(a.wall_s, a.wall_share_s, a.gpu_busy_s, a.timing_s) for a in attempts] == [
            (9.5, 7.0, 3.25, 2.0), (4.0, 4.0, None, 0.0), (None, None, None, None)
        ]


def notebook_with(entries: int) -> Notebook:
    notebook = Notebook()
    for iteration in range(entries):
        nb.add_attempt(notebook, iteration + 1, Candidate(0, "a", "tile 64"), EvaluateResult(status="ok", speedup=1.1))
    return notebook


async def test_compact_without_llm_is_deterministic():
    compactor = Compactor()
    request = CompactInput(run_id="r", goal=Goal(), notebook=notebook_with(10), proposer=ProposerConfig(), keep_recent=4)
    result = await ActivityEnvironment().run(compactor.compact, request)
    assert result.notebook == nb.compact(request.notebook, 4) and result.tokens_used == 0


async def test_llm_compaction_distils_lessons_and_falls_back_on_failure():
    with FakeOpenAIServer() as server:
        server.script(
            completion_reply("Lessons:\n- tile 64 is steady at 1.1x\n- never split K\nnot a lesson", total_tokens=300),
            error_reply(500, "upstream down"),
        )
        compactor = Compactor(LLMEndpoint(base_url=server.base_url, api_key=COMPACT_KEY))
        request = CompactInput(
            run_id="r",
            goal=Goal(target=2.5, intent="beat FLA"),
            notebook=notebook_with(10),
            proposer=ProposerConfig(kind="llm", model="fake-model"),
            keep_recent=4,
        )
        env = ActivityEnvironment()
        distilled = await env.run(compactor.compact, request)
        fallback = await env.run(compactor.compact, request)
        prompt = server.requests[0].prompt_text()
        authorization = server.requests[0].headers["authorization"]

    assert distilled.tokens_used == 300
    assert authorization == f"Bearer {COMPACT_KEY}"  # the worker's key, given at construction
    assert distilled.notebook.stats["llm_lessons"] == ["tile 64 is steady at 1.1x", "never split K"]
    assert distilled.notebook.lessons[-2:] == ["tile 64 is steady at 1.1x", "never split K"]
    assert len(distilled.notebook.entries) == 4
    assert prompt.index("Goal: 2.5x geomean speedup over the baseline (beat FLA)") < prompt.index("1 #0 tile 64: ok 1.1x")
    assert fallback.notebook == nb.compact(request.notebook, 4) and fallback.tokens_used == 0
