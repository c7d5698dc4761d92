"""Runs, attempts and tokens through the repository helpers, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select

from store import repository
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
        repository.update_run(session, "run-0", status="completed", stop_reason="goal reached")
    with session_scope(database_url) as session:
        runs, count = repository.list_runs(session, problem="kda")
        assert count == 3 and {r.id for r in runs} == {"run-0", "run-2", "run-4"}
        runs, count = repository.list_runs(session, status="completed")
        assert count == 1 and runs[0].stop_reason == "goal reached"
        page, count = repository.list_runs(session, offset=3, limit=10)
        assert count == 5 and len(page) == 2
        with pytest.raises(ValueError, match="limit must be between 1 and 1000, got 0"):
            repository.list_runs(session, limit=0)


def test_update_unknown_run_raises_key_error(database_url):
    with session_scope(database_url) as session, pytest.raises(KeyError, match="run nope not found"):
        repository.update_run(session, "nope", status="failed")


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


def test_best_attempt_is_unique_and_updates_the_run(database_url):
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
        assert run.best_attempt_id == second_id and run.best_speedup == 1.7 and run.iteration == 2
        best = session.scalars(select(Attempt).where(Attempt.is_best.is_(True))).all()
        assert [a.id for a in best] == [second_id]


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
