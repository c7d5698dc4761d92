"""Runs, attempts and tokens through the repository helpers, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select

from store import repository, run_progress
from store.db import session_scope
from store.models import ApiToken, Attempt
from workflows.types import Budget, Goal, ProposerConfig


def make_run(url: str, run_id: str = "run-1", problem: str = "kda") -> None:
    with session_scope(url) as session:
        repository.create_run(
            session,
            run_id=run_id,
            problem=problem,
            goal=Goal(target=3.0),
            budget=Budget(iterations=10),
            proposer=ProposerConfig(kind="search"),
            candidates_per_iteration=2,
            workflow_id=run_id,
        )


def attempt_fields(iteration: int, index: int, *, speedup: float | None = 1.0, is_best: bool = False) -> dict:
    return dict(
        iteration=iteration,
        index=index,
        strategy="tile 64x64",
        knobs={"BT": 64},
        source_sha="a" * 64,
        status="ok" if speedup is not None else "incorrect",
        message="",
        speedup=speedup,
        roofline=None,
        timing_kind="interpreter",
        report_sha=None,
        is_best=is_best,
        gpu_seconds=0.5,
    )


def test_create_and_read_run_keeps_dataclass_fields(database_url):
    make_run(database_url)
    with session_scope(database_url) as session:
        run = repository.get_run(session, "run-1")
        assert run.status == "running"
        assert run.goal["target"] == 3.0
        assert run.budget["iterations"] == 10
        assert run.proposer["kind"] == "search"
        assert run.iteration == 0 and run.best_speedup is None
        assert repository.get_run(session, "missing") is None


def test_list_runs_filters_and_pages(database_url):
    for i in range(5):
        make_run(database_url, f"run-{i}", problem="kda" if i % 2 == 0 else "mla-decode")
    with session_scope(database_url) as session:
        run_progress.record_progress(session, "run-0", status="completed", stop_reason="goal reached")
    with session_scope(database_url) as session:
        runs, count = repository.list_runs(session, problem="kda")
        assert count == 3 and {r.id for r in runs} == {"run-0", "run-2", "run-4"}
        runs, count = repository.list_runs(session, status="completed")
        assert count == 1 and runs[0].stop_reason == "goal reached"
        page, count = repository.list_runs(session, offset=3, limit=10)
        assert count == 5 and len(page) == 2
        with pytest.raises(ValueError, match="limit must be between 1 and 1000, got 0"):
            repository.list_runs(session, limit=0)


def test_progress_of_an_unknown_run_raises_key_error(database_url):
    with session_scope(database_url) as session, pytest.raises(KeyError, match="run nope not found"):
        run_progress.record_progress(session, "nope", status="failed")


def test_progress_never_moves_the_iteration_backwards(database_url):
    """The record activity writes iteration 5 before the workflow's own state says 5: a
    record_run carrying 4 in between leaves 5, and the other fields it carries still land."""
    make_run(database_url)
    with session_scope(database_url) as session:
        run_progress.record_progress(session, "run-1", iteration=5)
        run = run_progress.record_progress(session, "run-1", iteration=4, status="paused", stop_reason="paused by user")
        assert (run.iteration, run.status, run.stop_reason) == (5, "paused", "paused by user")
        assert run_progress.record_progress(session, "run-1", iteration=6).iteration == 6


def test_mark_ended_ends_only_live_rows(database_url):
    """The reconciler's write: a running or paused row ends; a finished row keeps the workflow's word."""
    for run_id in ("running", "paused", "done"):
        make_run(database_url, run_id)
    with session_scope(database_url) as session:
        run_progress.record_progress(session, "paused", status="paused")
        run_progress.record_progress(session, "done", status="completed", stop_reason="goal_reached")
    with session_scope(database_url) as session:
        assert [r.id for r in run_progress.live_runs(session)] == ["running", "paused"]
        for run_id in ("running", "paused", "done"):
            changed = run_progress.mark_ended(session, run_id, status="failed", stop_reason="the workflow was terminated")
            assert changed == (run_id != "done")
        assert run_progress.mark_ended(session, "ghost", status="failed", stop_reason="x") is False
        with pytest.raises(ValueError, match="mark_ended takes a final status, got 'running'"):
            run_progress.mark_ended(session, "running", status="running", stop_reason="")
    with session_scope(database_url) as session:
        ended = {r.id: (r.status, r.stop_reason) for r in repository.list_runs(session)[0]}
        assert ended == {
            "running": ("failed", "the workflow was terminated"),
            "paused": ("failed", "the workflow was terminated"),
            "done": ("completed", "goal_reached"),
        }
        assert run_progress.live_runs(session) == []


def test_record_attempt_is_idempotent(database_url):
    make_run(database_url)
    with session_scope(database_url) as session:
        first, created = repository.record_attempt(session, run_id="run-1", **attempt_fields(1, 0, speedup=1.2))
        assert created
        first_id = first.id
    with session_scope(database_url) as session:
        again, created = repository.record_attempt(session, run_id="run-1", **attempt_fields(1, 0, speedup=9.9))
        assert not created
        assert again.id == first_id and again.speedup == 1.2
        attempts, count = repository.list_attempts(session, "run-1")
        assert count == 1


def test_best_attempt_is_unique_and_the_run_row_is_left_to_progress(database_url):
    """record_attempt writes attempt rows only (one is_best at a time); the run's iteration and
    best move only through record_progress, the workflow's one writer of them."""
    make_run(database_url)
    with session_scope(database_url) as session:
        repository.record_attempt(session, run_id="run-1", **attempt_fields(1, 0, speedup=1.1, is_best=True))
        repository.record_attempt(session, run_id="run-1", **attempt_fields(1, 1, speedup=None))
        second, _ = repository.record_attempt(
            session, run_id="run-1", **attempt_fields(2, 0, speedup=1.7, is_best=True)
        )
        second_id = second.id
    with session_scope(database_url) as session:
        run = repository.get_run(session, "run-1")
        assert (run.best_attempt_id, run.best_speedup, run.iteration) == (None, None, 0)
        best = session.scalars(select(Attempt).where(Attempt.is_best.is_(True))).all()
        assert [a.id for a in best] == [second_id]
        run_progress.record_progress(session, "run-1", iteration=2, best_speedup=1.7, best_attempt_id=second_id)
    with session_scope(database_url) as session:
        run = repository.get_run(session, "run-1")
        assert (run.best_attempt_id, run.best_speedup, run.iteration) == (second_id, 1.7, 2)


def test_list_attempts_orders_by_iteration_then_index(database_url):
    make_run(database_url)
    with session_scope(database_url) as session:
        for iteration, index in [(2, 1), (1, 1), (2, 0), (1, 0), (3, 0)]:
            repository.record_attempt(session, run_id="run-1", **attempt_fields(iteration, index))
    with session_scope(database_url) as session:
        attempts, count = repository.list_attempts(session, "run-1", offset=1, limit=3)
        assert count == 5
        assert [(a.iteration, a.index) for a in attempts] == [(1, 1), (2, 0), (2, 1)]


def test_record_attempt_for_unknown_run_raises(database_url):
    with session_scope(database_url) as session, pytest.raises(KeyError, match="run ghost not found"):
        repository.record_attempt(session, run_id="ghost", **attempt_fields(0, 0))


def test_concurrent_retries_record_one_attempt(database_url):
    """Eight threads record the same attempt at once (a retried activity racing itself)."""
    make_run(database_url)
    barrier = threading.Barrier(8)
    outcomes: list[tuple[int, bool]] = []
    errors: list[BaseException] = []

    def record() -> None:
        try:
            barrier.wait()
            with session_scope(database_url) as session:
                attempt, created = repository.record_attempt(session, run_id="run-1", **attempt_fields(4, 2))
                outcomes.append((attempt.id, created))
        except BaseException as error:  # surfaced below with the thread's exception
            errors.append(error)

    threads = [threading.Thread(target=record) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sum(created for _, created in outcomes) == 1
    assert len({attempt_id for attempt_id, _ in outcomes}) == 1
    with session_scope(database_url) as session:
        assert repository.list_attempts(session, "run-1")[1] == 1


def test_delete_run_removes_its_attempts(database_url):
    make_run(database_url)
    with session_scope(database_url) as session:
        repository.record_attempt(session, run_id="run-1", **attempt_fields(0, 0))
    with session_scope(database_url) as session:
        assert repository.delete_run(session, "run-1")
        assert not repository.delete_run(session, "run-1")
    with session_scope(database_url) as session:
        assert repository.list_attempts(session, "run-1")[1] == 0


def test_tokens_are_stored_hashed_and_verify(database_url):
    with session_scope(database_url) as session:
        token = repository.create_token(session, name="local")
    with session_scope(database_url) as session:
        stored = session.scalars(select(ApiToken)).one()
        assert stored.token_hash == repository.hash_token(token)
        assert token not in stored.token_hash and stored.last_used_at is None
        assert repository.verify_token(session, token)
        assert not repository.verify_token(session, token + "x")
        assert not repository.verify_token(session, "")
    with session_scope(database_url) as session:
        assert session.scalars(select(ApiToken)).one().last_used_at is not None


def test_attempt_history_is_the_columns_of_earlier_iterations_in_order(database_url):
    make_run(database_url)
    make_run(database_url, "other-run")
    with session_scope(database_url) as session:
        for iteration, index in [(3, 0), (1, 1), (2, 0), (1, 0), (2, 1)]:
            fields = attempt_fields(iteration, index, speedup=None if index else 1.0 + iteration / 10)
            repository.record_attempt(session, run_id="run-1", **{**fields, "message": f"m{iteration}{index}"})
        repository.record_attempt(session, run_id="other-run", **attempt_fields(1, 0))
    with session_scope(database_url, read_only=True) as session:
        history = repository.attempt_history(session, "run-1", before_iteration=3)
        assert history == [
            (1, 0, "tile 64x64", {"BT": 64}, "ok", 1.1, "m10", None),
            (1, 1, "tile 64x64", {"BT": 64}, "incorrect", None, "m11", None),
            (2, 0, "tile 64x64", {"BT": 64}, "ok", 1.2, "m20", None),
            (2, 1, "tile 64x64", {"BT": 64}, "incorrect", None, "m21", None),
        ]
        assert repository.attempt_history(session, "run-1", before_iteration=1) == []
        assert len(repository.attempt_history(session, "run-1", before_iteration=99)) == 5
        with pytest.raises(ValueError, match="before_iteration must be >= 0, got -1"):
            repository.attempt_history(session, "run-1", before_iteration=-1)


def test_attempt_history_reads_through_the_run_iteration_index(database_url):
    """The (run_id, iteration, index) unique constraint's index serves the history query: no scan
    of the attempts table, however many runs share it (so no extra index or migration is needed)."""
    from sqlalchemy import text

    make_run(database_url)
    with session_scope(database_url) as session:
        query = repository.select(*repository.HISTORY_COLUMNS).where(
            Attempt.run_id == "run-1", Attempt.iteration < 5
        ).order_by(Attempt.iteration, Attempt.index)
        compiled = query.compile(session.bind, compile_kwargs={"literal_binds": True})
        if session.bind.dialect.name == "sqlite":
            plan = " ".join(str(row[-1]) for row in session.execute(text(f"EXPLAIN QUERY PLAN {compiled}")))
            assert "USING INDEX sqlite_autoindex_attempts_1" in plan, plan
            assert "USE TEMP B-TREE" not in plan, plan  # the index already gives the order
        else:
            session.execute(text("SET LOCAL enable_seqscan = off"))  # a tiny table would be scanned anyway
            plan = " ".join(row[0] for row in session.execute(text(f"EXPLAIN {compiled}")))
            assert "uq_attempts_run_iteration_index" in plan, plan
