"""Alembic brings an empty database to a schema that matches the ORM models."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from store import repository
from store.db import make_engine, session_scope, upgrade
from store.models import ApiToken, Base


def test_upgrade_from_empty_creates_every_table(empty_database_url):
    engine = make_engine(empty_database_url)
    assert inspect(engine).get_table_names() == []
    upgrade(empty_database_url)
    tables = set(inspect(engine).get_table_names())
    assert {"runs", "attempts", "artifacts", "api_tokens", "alembic_version"} <= tables
    with session_scope(empty_database_url) as session:
        repository.create_token(session, name="after-upgrade")


def test_migrated_schema_matches_the_models(empty_database_url):
    upgrade(empty_database_url)
    with make_engine(empty_database_url).connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert differences == []


def test_upgrade_twice_is_a_no_op(empty_database_url):
    upgrade(empty_database_url)
    with session_scope(empty_database_url) as session:
        repository.create_token(session, name="kept")
    upgrade(empty_database_url)
    with session_scope(empty_database_url) as session:
        assert session.query(ApiToken).count() == 1


def test_a_database_of_the_first_schema_upgrades_with_its_runs(empty_database_url):
    # A store written by the first release (revision 0001) keeps its runs; the new column is empty.
    upgrade(empty_database_url, revision="0001")
    engine = make_engine(empty_database_url)
    assert "budget_used" not in {c["name"] for c in inspect(engine).get_columns("runs")}
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO runs (id, problem, status, goal, budget, proposer, candidates_per_iteration, iteration,"
            " stop_reason, workflow_id, created_at, updated_at) VALUES ('old-run', 'kda', 'completed', '{}', '{}',"
            " '{}', 2, 5, 'plateau', 'old-run', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
        ))
    upgrade(empty_database_url)
    with session_scope(empty_database_url) as session:
        run = repository.get_run(session, "old-run")
        assert (run.iteration, run.stop_reason, run.budget_used) == (5, "plateau", None)


def _attempt(session, run_id: str, index: int, **figures):
    attempt, created = repository.record_attempt(
        session, run_id=run_id, iteration=1, index=index, strategy="s", knobs=None, source_sha="a" * 64,
        status="ok", message="", speedup=1.0, roofline=None, timing_kind="gpu", report_sha=None, is_best=False,
        gpu_seconds=1.0, **figures,
    )
    assert created
    return attempt.id


def test_attempt_gpu_figures_round_trip(empty_database_url):
    upgrade(empty_database_url)
    with session_scope(empty_database_url) as session:
        repository.create_run(session, run_id="r", problem="kda", goal={}, budget={}, proposer={},
                              candidates_per_iteration=1, workflow_id="r")
        measured = _attempt(session, "r", 0, wall_s=12.5, wall_share_s=6.25, gpu_busy_s=4.125, timing_s=3.5)
        cpu = _attempt(session, "r", 1, wall_s=2.0, wall_share_s=2.0, gpu_busy_s=None, timing_s=0.0)
        unmeasured = _attempt(session, "r", 2)
    with session_scope(empty_database_url) as session:
        def figures(attempt_id):
            a = repository.get_attempt(session, attempt_id)
            return a.wall_s, a.wall_share_s, a.gpu_busy_s, a.timing_s

        assert figures(measured) == (12.5, 6.25, 4.125, 3.5)
        assert figures(cpu) == (2.0, 2.0, None, 0.0)
        assert figures(unmeasured) == (None, None, None, None)
        assert sorted(repository.busy_rows(session, "r")) == [(2.0, 2.0, None, 0.0), (12.5, 6.25, 4.125, 3.5)]


def test_attempts_of_revision_0005_upgrade_with_empty_gpu_figures(empty_database_url):
    upgrade(empty_database_url, revision="0005")
    engine = make_engine(empty_database_url)
    assert "gpu_busy_s" not in {c["name"] for c in inspect(engine).get_columns("attempts")}
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO runs (id, problem, status, goal, budget, proposer, candidates_per_iteration, iteration,"
            " stop_reason, workflow_id, created_at, updated_at) VALUES ('old', 'kda', 'completed', '{}', '{}',"
            " '{}', 1, 1, '', 'old', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
        ))
        connection.execute(text(
            "INSERT INTO attempts (run_id, iteration, index, strategy, source_sha, status, message, timing_kind,"
            " is_best, gpu_seconds, created_at) VALUES ('old', 1, 0, 's', :sha, 'ok', '', 'gpu', false, 2.0,"
            " CURRENT_TIMESTAMP)".replace(" index,", ' "index",')
        ), {"sha": "b" * 64})
    upgrade(empty_database_url)
    with session_scope(empty_database_url) as session:
        (old,) = repository.list_attempts(session, "old")[0]
        assert (old.gpu_seconds, old.wall_s, old.gpu_busy_s, old.timing_s) == (2.0, None, None, None)
        assert repository.busy_rows(session, "old") == []
