"""Celery tasks of the alerts domain: detection after an upload, re-detection on request.
They take ids, own their transaction, and are idempotent (re-running updates alerts in place)."""

from __future__ import annotations

from typing import Any

from ..celery_app import celery_app
from ..db import session_scope
from ..settings import get_settings
from . import service


@celery_app.task(name=service.DETECT_TASK, time_limit=120, soft_time_limit=110)
def detect_run(run_id: int) -> dict[str, Any]:
    """Detect on the series an uploaded run changed; upsert alert groups; refresh verdicts."""
    with session_scope() as session:
        return service.detect_run(session, run_id, get_settings()).as_dict()


@celery_app.task(name=service.REDETECT_TASK, time_limit=600, soft_time_limit=590)
def redetect(branch_id: int, machine_id: int) -> dict[str, Any]:
    """Detect again over every config of a branch x machine (after a detector change)."""
    with session_scope() as session:
        return service.redetect(session, branch_id, machine_id, get_settings()).as_dict()
