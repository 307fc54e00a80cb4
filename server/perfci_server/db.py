"""Engine and sessions. The caller owns the transaction: request dependency or task scope commits.

Work that must only happen once data is durable (sending Celery tasks) is queued on the session
with :func:`after_commit` and runs after a successful commit; a rollback discards it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from .settings import Settings, get_settings

_AFTER_COMMIT_KEY = "perfci.after_commit"
_lock = threading.Lock()
_engine: Engine | None = None
_session_factory: sessionmaker[Session] | None = None


def make_engine(url: str, *, pool_size: int = 10, echo: bool = False) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            echo=echo,
            # Requests run in a threadpool; SQLite serialises writers itself (busy timeout below).
            connect_args={"check_same_thread": False, "timeout": 30},
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, echo=echo, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")  # readers do not block the single writer
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def get_engine(settings: Settings | None = None) -> Engine:
    global _engine, _session_factory
    with _lock:
        if _engine is None:
            settings = settings or get_settings()
            if settings.is_sqlite and not settings.database_url:
                settings.data_dir.mkdir(parents=True, exist_ok=True)
            _engine = make_engine(
                settings.effective_database_url, pool_size=settings.database_pool_size, echo=settings.database_echo
            )
            _session_factory = sessionmaker(_engine, expire_on_commit=False)
        return _engine


def reset_engine() -> None:
    """Forget the process-wide engine (tests that switch databases; forked workers)."""
    global _engine, _session_factory
    with _lock:
        if _engine is not None:
            _engine.dispose()
        _engine = _session_factory = None


def new_session() -> Session:
    get_engine()
    assert _session_factory is not None
    return _session_factory()


@contextmanager
def session_scope() -> Iterator[Session]:
    """A unit of work outside a request (Celery tasks, CLI): commit on success, roll back on error."""
    session = new_session()
    try:
        yield session
    except BaseException:
        end_session(session, commit=False)
        raise
    end_session(session, commit=True)


def end_session(session: Session, commit: bool) -> None:
    """Commit (or roll back) and close a session opened with :func:`new_session`."""
    try:
        if commit:
            session.commit()
        else:
            session.rollback()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def after_commit(session: Session, callback: Callable[[], None]) -> None:
    """Run ``callback`` once the session's current transaction has committed."""
    session.info.setdefault(_AFTER_COMMIT_KEY, []).append(callback)


@event.listens_for(Session, "after_commit")
def _run_after_commit(session: Session) -> None:
    callbacks = session.info.pop(_AFTER_COMMIT_KEY, [])
    for callback in callbacks:
        callback()


@event.listens_for(Session, "after_soft_rollback")
def _drop_after_rollback(session: Session, previous_transaction: Any) -> None:
    if previous_transaction.parent is None:  # only the outermost rollback discards the queue
        session.info.pop(_AFTER_COMMIT_KEY, None)


def insert_ignoring_conflicts(
    session: Session, table: Any, rows: list[dict[str, Any]], conflict_columns: list[str], returning: Any = None
) -> Any:
    """INSERT ... ON CONFLICT (cols) DO NOTHING on PostgreSQL and SQLite.

    With ``returning`` (a column), the result yields one row per row actually inserted; rowcount
    is not reliable for multi-row inserts, so callers that count use this.
    """
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert  # type: ignore[assignment]
    else:  # pragma: no cover - only the two supported backends
        raise RuntimeError(f"unsupported database dialect {dialect}")
    statement = insert(table).on_conflict_do_nothing(index_elements=conflict_columns)
    if returning is not None:
        statement = statement.returning(returning)
    if len(rows) == 1:
        return session.execute(statement.values(rows[0]))
    return session.execute(statement, rows)


def is_postgresql(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"
