"""An empty database per test, on SQLite or on the machine's PostgreSQL, for the store, API and load tests.

PostgreSQL tests get their own schema (through the connection's search_path) and drop it
afterwards, so they never see each other's rows. Set MARATHON_TEST_POSTGRES_URL to point
elsewhere; when no server answers, the PostgreSQL cases skip with the reason.
"""

from __future__ import annotations

import os
import uuid

import pytest

from store.db import dispose_engine

POSTGRES_URL = os.environ.get("MARATHON_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _postgres_admin():
    import psycopg

    plain = POSTGRES_URL.replace("postgresql+psycopg://", "postgresql://")
    try:
        return psycopg.connect(plain, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as error:
        pytest.skip(f"PostgreSQL at {POSTGRES_URL} is not reachable: {error}")


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database_url(request, tmp_path):
    """The SQLAlchemy URL of a database with no tables, on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
        yield url
        dispose_engine(url)
        return
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with _postgres_admin() as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    separator = "&" if "?" in POSTGRES_URL else "?"
    url = f"{POSTGRES_URL}{separator}options=-csearch_path%3D{schema}"
    yield url
    dispose_engine(url)
    with _postgres_admin() as admin:
        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
