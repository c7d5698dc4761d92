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
