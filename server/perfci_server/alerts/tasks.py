"""Celery tasks of the alerts domain: detection after uploads, its sweep, and a force push's cleanup.
They take ids, own their transaction, and are idempotent (re-running updates alerts in place)."""

from __future__ import annotations

from typing import Any

from .. import dispatch
from ..celery_app import DETECTION_SWEEP_TASK, celery_app
from ..db import session_scope
from ..dispatch import DECIDE_SERIES_TASK, FORGET_ABANDONED_TASK, REDETECT_BRANCH_TASK
from ..settings import get_settings
from . import detection, verdicts


@celery_app.task(name=detection.DETECT_TASK, time_limit=120, soft_time_limit=110)
def detect_pending(machine_id: int) -> dict[str, Any]:
    """Detect on the series of the machine's new runs; upsert alert groups; refresh verdicts."""
    dispatch.started(detection.DETECT_TASK, machine_id)  # before reading: later uploads queue a new task
    with session_scope() as session:
        return detection.detect_pending(session, machine_id, get_settings()).as_dict()


@celery_app.task(name=DETECTION_SWEEP_TASK, time_limit=60, soft_time_limit=50)
def detect_stragglers() -> list[int]:
    """Beat: resend detection for runs that waited too long (their task was lost)."""
    with session_scope() as session:
        return detection.resend_stragglers(session, get_settings())


@celery_app.task(name=FORGET_ABANDONED_TASK, time_limit=60, soft_time_limit=50)
def forget_abandoned(branch_id: int, commit_ids: list[int]) -> int:
    """After a force push: drop the branch's untriaged alert groups about the commits it abandoned."""
    with session_scope() as session:
        return detection.forget_abandoned(session, branch_id, commit_ids, get_settings())


@celery_app.task(name=DECIDE_SERIES_TASK, time_limit=60, soft_time_limit=50)
def decide_series(machine_id: int, commit_ids: list[int]) -> int:
    """The forge's sweep found these series verdicts pending with nothing of their own running:
    decide them again (what they waited for may have ended without telling them)."""
    with session_scope() as session:
        return len(verdicts.record_verdicts(session, machine_id, commit_ids, get_settings()))


@celery_app.task(name=REDETECT_BRANCH_TASK, time_limit=60, soft_time_limit=50)
def redetect_branch(branch_id: int) -> list[int]:
    """A branch's order changed (commits placed from payloads replaced by git's order): detection
    again on every machine that measured it."""
    with session_scope() as session:
        return detection.redetect_branch(session, branch_id)
