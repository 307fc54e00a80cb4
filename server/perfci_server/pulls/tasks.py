"""Celery tasks of the pull-request domain: prepare a new head (mirror fetch, merge-base, jobs) and
decide after its jobs end (the forge room posts the verdicts and the comment). They take ids and
own their transactions; the fetch happens outside any."""

from __future__ import annotations

import logging
from typing import Any

from ..celery_app import celery_app
from ..db import session_scope
from ..dispatch import retry_later, started
from ..repos import mirror
from ..settings import get_settings
from . import service

log = logging.getLogger(__name__)


@celery_app.task(name=service.PREPARE_TASK, bind=True, max_retries=None, time_limit=600, soft_time_limit=590)
def prepare(self: Any, pull_request_id: int) -> str:
    settings = get_settings()
    with session_scope() as session:
        target = service.target_of(session, pull_request_id)
    if target is None:
        return "nothing to prepare"
    try:
        sides = service.read_sides(settings, target, settings.mirror_fetch_timeout_seconds)
    except mirror.ForgeBusy as exc:  # its forge holds every fetch slot (it may hang): free this worker
        prepare.apply_async(args=(pull_request_id,), countdown=mirror.ForgeBusy.retry_seconds)
        return f"waiting: {exc}"
    except mirror.MirrorUnavailable as exc:
        with session_scope() as session:
            service.note_waiting(session, pull_request_id, target.head_sha, str(exc))
        return retry_later(self, settings, f"pull request {pull_request_id}", exc, "waiting")
    with session_scope() as session:
        return service.schedule(session, target, sides, settings)


@celery_app.task(name=service.EVALUATE_TASK, time_limit=120, soft_time_limit=110)
def evaluate(pull_request_id: int) -> str:
    started(service.EVALUATE_TASK, pull_request_id)
    with session_scope() as session:
        return service.evaluate(session, pull_request_id, get_settings())
