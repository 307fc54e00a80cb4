"""Celery tasks of the jobs domain. They take ids, own their transaction, and are idempotent."""

from __future__ import annotations

from typing import Any

from ..celery_app import REQUEUE_TASK, celery_app
from ..db import session_scope
from ..dispatch import BACKFILL_TASK
from ..settings import get_settings
from . import service


@celery_app.task(name=REQUEUE_TASK, time_limit=60, soft_time_limit=50)
def requeue_expired_leases() -> dict[str, Any]:
    """Periodic (beat): requeue jobs whose lease expired, or fail them when out of attempts."""
    with session_scope() as session:
        requeued, failed = service.requeue_expired(session)
    return {"requeued": requeued, "failed": failed}


@celery_app.task(name=BACKFILL_TASK, time_limit=120, soft_time_limit=110)
def backfill(machine_ids: list[int] | None, config_ids: list[int] | None) -> int:
    """History for machines or configs that were added (idempotent: existing jobs are kept)."""
    with session_scope() as session:
        return service.backfill(session, get_settings(), machine_ids=machine_ids, config_ids=config_ids)
