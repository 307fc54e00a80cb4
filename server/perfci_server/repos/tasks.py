"""Celery tasks of the repositories domain. They take ids, own their transaction, and are idempotent."""

from __future__ import annotations

from ..celery_app import COMPLETE_PUSHES_TASK, celery_app
from ..db import session_scope
from ..settings import get_settings
from . import repository as repo_sql
from . import service

BATCH = 20  # pushes one sweep retries at most (each may fetch a mirror)
FETCH_TIMEOUT_SECONDS = 240.0  # one fetch inside the task's time limit: a first clone can be large


@celery_app.task(name=COMPLETE_PUSHES_TASK, time_limit=600, soft_time_limit=590)
def complete_pushes() -> dict[str, int]:
    """Periodic (beat): fetch the mirror again for incomplete pushes and record what they lacked."""
    with session_scope() as session:
        pending = repo_sql.incomplete_pushes(session, BATCH)
    added, completed, unreachable = 0, 0, set()
    for push_id, repository_id in pending:
        if repository_id in unreachable:
            continue  # one failed fetch per repository and sweep
        with session_scope() as session:  # one transaction per push: one unreachable forge holds up no other
            push = repo_sql.lock_push(session, push_id)
            if push is None or push.complete:
                continue
            added += len(service.complete_push(session, push, get_settings(), FETCH_TIMEOUT_SECONDS))
            completed += push.complete
            if not push.complete:
                unreachable.add(repository_id)
    return {"incomplete": len(pending), "completed": completed, "commits_added": added}
