"""Engines and sessions for the store.

SQLite (the default, under the home directory) is written by several processes at once (the
API, the CPU worker's record activity, the CLI through the API), so every SQLite connection runs
in WAL mode with a busy timeout, and every writing transaction starts with ``BEGIN IMMEDIATE``:
a read-then-write transaction that began deferred can fail at once with "database is locked"
when another writer committed in between, whereas an immediate one waits its turn. Sessions
opened with ``read_only=True`` begin deferred, so readers never queue behind writers.

PostgreSQL is reached through psycopg 3; ``postgresql://`` and ``postgres://`` URLs are
rewritten to ``postgresql+psycopg://`` so a plain ``DATABASE_URL`` works.
"""

from __future__ import annotations

import fcntl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

SQLITE_BUSY_TIMEOUT_MS = 30_000

READ_ONLY_OPTION = "marathon_read_only"

_engines: dict[str, Engine] = {}
_session_factories: dict[tuple[str, bool], sessionmaker[Session]] = {}
_lock = threading.Lock()


def normalize_url(url: str) -> str:
    """Pick the psycopg 3 driver for bare PostgreSQL URLs; leave everything else as given."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _sqlite_file(url: str) -> Path | None:
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def on_connect(dbapi_connection, _record) -> None:
        # Let SQLAlchemy's "begin" event issue BEGIN itself (pysqlite's own implicit BEGIN
        # breaks SAVEPOINT and transactional DDL).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def on_begin(connection) -> None:
        read_only = connection.get_execution_options().get(READ_ONLY_OPTION, False)
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def make_engine(url: str) -> Engine:
    """Return the process-wide engine for ``url`` (created once per URL)."""
    url = normalize_url(url)
    with _lock:
        engine = _engines.get(url)
        if engine is not None:
            return engine
        if url.startswith("sqlite"):
            path = _sqlite_file(url)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(
                url, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
            )
            _configure_sqlite(engine)
        else:
            engine = create_engine(url, pool_pre_ping=True)
        _engines[url] = engine
        _session_factories[(url, False)] = sessionmaker(bind=engine, expire_on_commit=False)
        reader = engine.execution_options(**{READ_ONLY_OPTION: True})
        _session_factories[(url, True)] = sessionmaker(bind=reader, expire_on_commit=False)
        return engine


def dispose_engine(url: str) -> None:
    """Close the pooled connections of ``url``'s engine and forget it (tests, shutdown)."""
    url = normalize_url(url)
    with _lock:
        engine = _engines.pop(url, None)
        _session_factories.pop((url, False), None)
        _session_factories.pop((url, True), None)
    if engine is not None:
        engine.dispose()


def _resolve(url: str) -> str:
    # The store reads no settings: its callers (the API, the workers, the CLI) pass the URL they
    # were configured with (``Settings.resolved_database_url``).
    if not isinstance(url, str) or not url:
        raise ValueError(f"the store needs a database URL (e.g. sqlite:///path/marathon.db), got {url!r}")
    return normalize_url(url)


@contextmanager
def session_scope(url: str, *, read_only: bool = False) -> Iterator[Session]:
    """A session on the database at ``url`` that commits when the block ends and rolls back when
    it raises. ``read_only`` sessions must not write: on SQLite they do not take the write lock (a
    write in one may fail with "database is locked").
    """
    url = _resolve(url)
    make_engine(url)
    session = _session_factories[(url, read_only)]()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


@contextmanager
def _migration_lock(url: str, engine: Engine) -> Iterator[None]:
    """Serialize concurrent upgrades (the API and a worker starting together)."""
    path = _sqlite_file(url) if url.startswith("sqlite") else None
    if path is None:
        yield
        return
    with open(path.with_name(path.name + ".migrate-lock"), "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the schema at ``url`` to ``revision`` with Alembic (the migrations ship with the package)."""
    from alembic import command
    from alembic.config import Config

    url = _resolve(url)
    engine = make_engine(url)
    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    with _migration_lock(url, engine), engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            # Two processes upgrading one PostgreSQL database wait for each other here.
            connection.execute(text("SELECT pg_advisory_xact_lock(7305092001)"))
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
