"""SQLite under several writers: readers never queue behind an open write transaction."""

from __future__ import annotations

import threading

from store import repository
from store.db import session_scope, upgrade


def test_read_only_session_does_not_wait_for_a_writer(tmp_path):
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    upgrade(url)
    with session_scope(url) as session:
        repository.create_token(session, name="committed")
    writer_holds_lock = threading.Event()
    release_writer = threading.Event()

    def writer() -> None:
        with session_scope(url) as session:
            repository.create_token(session, name="uncommitted")
            writer_holds_lock.set()
            release_writer.wait(timeout=60)

    writer_thread = threading.Thread(target=writer)
    writer_thread.start()
    assert writer_holds_lock.wait(timeout=30)
    seen: list[list[str]] = []

    def reader() -> None:
        from store.models import ApiToken

        with session_scope(url, read_only=True) as session:
            seen.append(sorted(t.name for t in session.query(ApiToken)))

    reader_thread = threading.Thread(target=reader)
    reader_thread.start()
    # A reader that took the write lock would sit out the 30 s busy timeout, then fail.
    reader_thread.join(timeout=20)
    finished_while_writer_open = not reader_thread.is_alive()
    release_writer.set()
    writer_thread.join()
    reader_thread.join()
    assert finished_while_writer_open
    assert seen == [["committed"]]
