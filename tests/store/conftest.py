"""A fresh, migrated database per test, on SQLite and on the machine's PostgreSQL (see
``tests/databases.py``)."""

from __future__ import annotations

import pytest

from store.db import upgrade
from tests.databases import empty_database_url  # noqa: F401  (fixture)


@pytest.fixture
def database_url(empty_database_url):  # noqa: F811
    """A URL of a database migrated to the latest schema."""
    upgrade(empty_database_url)
    return empty_database_url
