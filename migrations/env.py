"""Alembic environment: the models' metadata, the URL from perfci settings (or `-x url=`)."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection

from perfci_server.db import make_engine
from perfci_server.models import Base
from perfci_server.settings import get_settings

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logging", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _url() -> str:
    return context.get_x_argument(as_dictionary=True).get("url") or config.attributes.get("url") or get_settings().effective_database_url


def _configure(**kwargs: object) -> None:
    url = str(kwargs.pop("url", ""))
    connection = kwargs.get("connection")
    dialect = connection.dialect.name if isinstance(connection, Connection) else url.split(":", 1)[0]
    context.configure(
        target_metadata=target_metadata,
        compare_type=True,
        # SQLite cannot ALTER most things: batch mode copies the table instead.
        render_as_batch=dialect.startswith("sqlite"),
        **({"url": url} if url else {}),
        **kwargs,  # type: ignore[arg-type]
    )


def run_migrations_offline() -> None:
    _configure(url=_url(), literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:  # handed in by perfci_server.migrate (tests, embedded startup)
        _configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(_url())
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "sqlite":
                # Batch mode copies a table and drops the old one; with foreign keys enforced (as the
                # server runs SQLite) that drop would cascade to every row that references it.
                conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
                conn.commit()  # end the transaction the statement began: the migrations open their own
            _configure(connection=conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
