"""Celery tasks of the alerts domain: detection after uploads and its sweep.
They take ids, own their transaction, and are idempotent (re-running updates alerts in place)."""

from __future__ import annotations

from typing import Any

from .. import dispatch
from ..celery_app import DETECTION_SWEEP_TASK, celery_app
from ..db import session_scope
from ..settings import get_settings
from . import service


@celery_app.task(name=service.DETECT_TASK, time_limit=120, soft_time_limit=110)
def detect_pending(machine_id: int) -> dict[str, Any]:
    """Detect on the series of the machine's new runs; upsert alert groups; refresh verdicts."""
    dispatch.started(service.DETECT_TASK, machine_id)  # before reading: later uploads queue a new task
    with session_scope() as session:
        return service.detect_pending(session, machine_id, get_settings()).as_dict()


@celery_app.task(name=DETECTION_SWEEP_TASK, time_limit=60, soft_time_limit=50)
def detect_stragglers() -> list[int]:
    """Beat: resend detection for runs that waited too long (their task was lost)."""
    with session_scope() as session:
        return service.resend_stragglers(session, get_settings())
