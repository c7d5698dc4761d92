"""Alembic brings an empty database to a schema that matches the ORM models."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

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
