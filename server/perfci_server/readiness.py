"""Readiness: can this process serve requests now? `/health` only says it is alive (liveness: a
restart will not help a database outage); `/ready` asks the database and, where one is configured,
the broker, so a load balancer sends traffic elsewhere while either is down. Why a dependency is
down (the driver's error, with its host and port) is for admins: anyone else learns only which one
is (:func:`without_reasons`)."""

from __future__ import annotations

from kombu import Connection
from sqlalchemy import text

from . import db
from .settings import Settings

BROKER_TIMEOUT_SECONDS = 2.0


def check(settings: Settings) -> dict[str, str]:
    """Each dependency's state, "ok" or why not."""
    checks = {"database": _database()}
    if settings.broker_url:
        checks["broker"] = _broker(settings.broker_url)
    return checks


def without_reasons(checks: dict[str, str]) -> dict[str, str]:
    return {name: "ok" if state == "ok" else "unavailable" for name, state in checks.items()}


def _database() -> str:
    try:
        with db.get_engine().connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:  # noqa: BLE001 - any failure means not ready; the reason is reported
        return _reason(exc)
    return "ok"


def _broker(url: str) -> str:
    try:
        with Connection(url, connect_timeout=BROKER_TIMEOUT_SECONDS) as connection:
            connection.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=BROKER_TIMEOUT_SECONDS)
    except Exception as exc:  # noqa: BLE001
        return _reason(exc)
    return "ok"


def _reason(exc: Exception) -> str:
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first}"[:300]
