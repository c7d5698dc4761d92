"""Where the store lives: SQLite under the home by default, or PostgreSQL (or any URL) through
``DATABASE_URL`` as deployments set it, with ``MARATHON_DATABASE_URL`` taking precedence."""

from __future__ import annotations

import pytest

from marathon.settings import Settings
from store import repository
from store.db import session_scope, upgrade


def test_default_is_sqlite_under_the_home(monkeypatch, tmp_path):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("MARATHON_DATABASE_URL", raising=False)
    monkeypatch.setenv("MARATHON_HOME", str(tmp_path))
    assert Settings(_env_file=None).resolved_database_url == f"sqlite:///{tmp_path / 'marathon.db'}"


def test_database_url_is_read_and_the_marathon_name_wins(monkeypatch):
    monkeypatch.delenv("MARATHON_DATABASE_URL", raising=False)
    monkeypatch.setenv("DATABASE_URL", "postgresql+psycopg://deploy@db:5432/marathon")
    assert Settings(_env_file=None).resolved_database_url == "postgresql+psycopg://deploy@db:5432/marathon"
    monkeypatch.setenv("MARATHON_DATABASE_URL", "sqlite:////tmp/explicit.db")
    assert Settings(_env_file=None).resolved_database_url == "sqlite:////tmp/explicit.db"


@pytest.mark.parametrize("empty_database_url", ["postgresql"], indirect=True)
def test_a_store_on_postgresql_through_database_url(monkeypatch, empty_database_url):
    # The machine's PostgreSQL, in a fresh schema (tests/store/conftest.py).
    monkeypatch.delenv("MARATHON_DATABASE_URL", raising=False)
    monkeypatch.setenv("DATABASE_URL", empty_database_url)
    url = Settings(_env_file=None).resolved_database_url
    assert url.startswith("postgresql")
    upgrade(url)
    with session_scope(url) as session:
        token = repository.create_token(session, name="via DATABASE_URL")
    with session_scope(url) as session:
        assert repository.verify_token(session, token)
        assert not repository.verify_token(session, token + "x")
