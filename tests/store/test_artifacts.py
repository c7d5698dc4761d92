"""Content-addressed artifacts round-trip and deduplicate."""

from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import func, select

from store.artifacts import get_text, put_text
from store.db import session_scope
from store.models import Artifact


def test_put_then_get_round_trips_unicode(database_url):
    text = "def kernel(q, k):\n    return q  # Δt ≤ 1 🚀\n"
    with session_scope(database_url) as session:
        sha = put_text(session, text)
    assert sha == hashlib.sha256(text.encode()).hexdigest()
    with session_scope(database_url) as session:
        assert get_text(session, sha) == text
        assert session.get(Artifact, sha).size == len(text.encode())


def test_put_is_idempotent_across_sessions(database_url):
    with session_scope(database_url) as session:
        first = put_text(session, "same")
    with session_scope(database_url) as session:
        second = put_text(session, "same")
        put_text(session, "other")
    assert first == second
    with session_scope(database_url) as session:
        assert session.scalar(select(func.count()).select_from(Artifact)) == 2


def test_unknown_sha_raises_key_error(database_url):
    with session_scope(database_url) as session, pytest.raises(KeyError, match="artifact 0+ not found"):
        get_text(session, "0" * 64)


def test_put_rejects_bytes(database_url):
    with session_scope(database_url) as session, pytest.raises(ValueError, match="put_text stores str, got bytes"):
        put_text(session, b"raw")
