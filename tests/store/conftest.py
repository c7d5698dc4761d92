"""A fresh, migrated database per test, on SQLite and on the machine's PostgreSQL (see
``tests/databases.py``)."""

from __future__ import annotations

import pytest

from store.db import upgrade
from tests.databases import KINDS, empty_database


@pytest.fixture(params=KINDS)
def empty_database_url(request, tmp_path):
    """A URL of an empty database (no tables)."""
    with empty_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def database_url(empty_database_url):
    """A URL of a database migrated to the latest schema."""
    upgrade(empty_database_url)
    return empty_database_url
