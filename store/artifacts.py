"""Content-addressed blobs: the key is the sha256 of the content, so storing twice is a no-op."""

from __future__ import annotations

import hashlib

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from store.models import Artifact


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def put_text(session: Session, text: str) -> str:
    """Store ``text`` (UTF-8) and return its sha256 hex key; storing the same text again is a no-op."""
    if not isinstance(text, str):
        raise ValueError(f"put_text stores str, got {type(text).__name__}")
    sha = sha256_text(text)
    if session.get(Artifact, sha) is not None:
        return sha
    try:
        with session.begin_nested():
            session.add(Artifact(sha256=sha, size=len(text.encode("utf-8")), text=text))
    except IntegrityError:
        # Another process stored the same content between our look-up and our insert.
        pass
    return sha


def get_text(session: Session, sha: str) -> str:
    """Return the text stored under ``sha``; an unknown key raises KeyError."""
    artifact = session.get(Artifact, sha)
    if artifact is None or artifact.text is None:
        raise KeyError(f"artifact {sha} not found")
    return artifact.text
