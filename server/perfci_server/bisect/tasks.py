"""Celery tasks of the bisect domain. They take ids, own their transaction, and are idempotent."""

from __future__ import annotations

from ..celery_app import celery_app
from ..db import session_scope
from ..settings import get_settings
from . import service


@celery_app.task(name=service.ADVANCE_TASK, time_limit=60, soft_time_limit=50)
def advance(bisect_id: int) -> str:
    """Advance one bisect with the results stored so far (sent after each ingested result)."""
    with session_scope() as session:
        return service.advance(session, bisect_id, get_settings())


@celery_app.task(name=service.ADVANCE_RUNNING_TASK, time_limit=300, soft_time_limit=290)
def advance_running() -> dict[str, str]:
    """Periodic (beat): advance every running bisect — catches jobs that ended without a result
    (agent errors, expired leases out of attempts), which no upload announces."""
    with session_scope() as session:
        ids = service.running_ids(session)
    outcomes = {}
    for bisect_id in ids:
        with session_scope() as session:
            outcomes[str(bisect_id)] = service.advance(session, bisect_id, get_settings())
    return outcomes
