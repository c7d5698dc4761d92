"""An empty database per test, on SQLite or on the machine's PostgreSQL, for the store and API tests.

PostgreSQL tests get their own schema (through the connection's search_path) and drop it
afterwards, so they never see each other's rows. Set MARATHON_TEST_POSTGRES_URL to point
elsewhere; when no server answers, the PostgreSQL cases skip with the reason.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from store.db import dispose_engine

POSTGRES_URL = os.environ.get("MARATHON_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
KINDS = ["sqlite", "postgresql"]


def _postgres_admin():
    import psycopg

    plain = POSTGRES_URL.replace("postgresql+psycopg://", "postgresql://")
    try:
        return psycopg.connect(plain, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as error:
        pytest.skip(f"PostgreSQL at {POSTGRES_URL} is not reachable: {error}")


@contextlib.contextmanager
def empty_database(kind: str, folder: Path) -> Iterator[str]:
    """The SQLAlchemy URL of a database with no tables; ``kind`` is one of ``KINDS``."""
    if kind == "sqlite":
        url = f"sqlite:///{folder / 'store.db'}"
        try:
            yield url
        finally:
            dispose_engine(url)
        return
    if kind != "postgresql":
        raise ValueError(f"unknown database kind {kind!r}; known: {KINDS}")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with _postgres_admin() as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    separator = "&" if "?" in POSTGRES_URL else "?"
    url = f"{POSTGRES_URL}{separator}options=-csearch_path%3D{schema}"
    try:
        yield url
    finally:
        dispose_engine(url)
        with _postgres_admin() as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
