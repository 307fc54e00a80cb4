"""Celery tasks of the forge domain: post one commit status (retried with backoff), re-send
pending ones (beat). The HTTP call happens outside any database transaction."""

from __future__ import annotations

import logging
from typing import Any

from ..celery_app import RESEND_STATUSES_TASK, celery_app
from ..db import session_scope
from ..settings import get_settings
from . import client, service

log = logging.getLogger(__name__)


@celery_app.task(name=service.POST_TASK, bind=True, max_retries=None, time_limit=90, soft_time_limit=80)
def post_status(self: Any, status_id: int) -> str:
    settings = get_settings()
    with session_scope() as session:
        prepared = service.prepare(session, status_id, settings)
    if prepared is None:
        return "nothing to post"
    post, version = prepared
    try:
        code = client.send(post, settings.forge_timeout_seconds)
    except client.ForgeRejected as exc:
        log.error("commit status %s refused, not retried: %s", status_id, exc)
        with session_scope() as session:
            service.record_failure(session, status_id, version, str(exc), permanent=True)
        return "refused"
    except client.ForgeUnavailable as exc:
        with session_scope() as session:
            service.record_failure(session, status_id, version, str(exc), permanent=False)
        return service.retry_later(self, settings, f"commit status {status_id}", exc, "pending")
    with session_scope() as session:
        service.record_sent(session, status_id, version)
    log.info("commit status %s posted (%s %s on %s: HTTP %s)", status_id, post.state.value, post.context, post.sha[:12], code)
    return "sent"


@celery_app.task(name=RESEND_STATUSES_TASK, time_limit=60, soft_time_limit=50)
def resend_pending() -> int:
    with session_scope() as session:
        return len(service.resend_pending(session, get_settings()))
