"""Alembic environment: migrations run on the connection ``store.db.upgrade`` hands over, or on
``sqlalchemy.url`` when Alembic is driven from its command line."""

from __future__ import annotations

from alembic import context

from store.db import make_engine
from store.models import Base

target_metadata = Base.metadata


def run_on(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        run_on(connection)
        return
    url = context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise ValueError("set sqlalchemy.url or pass a connection in config.attributes['connection']")
    with make_engine(url).begin() as connection:
        run_on(connection)


if context.is_offline_mode():
    raise ValueError("offline (SQL script) migrations are not supported; run store.db.upgrade(url)")
run_migrations_online()
