"""Celery tasks of the forge room: post one commit status or one pull-request comment (retried
with backoff), re-send pending statuses (beat). A status's HTTP call happens outside any database
transaction; a comment's while its pull request's row is locked, so two posts of one pull request
never both create a comment (bounded by the forge timeout)."""

from __future__ import annotations

import logging
from typing import Any

from ..celery_app import SETTLE_STATUSES_TASK, RESEND_STATUSES_TASK, celery_app
from ..db import session_scope
from ..dispatch import retry_later, started
from ..settings import get_settings
from . import client, comments, statuses
from . import repository as forge_sql

log = logging.getLogger(__name__)


@celery_app.task(name=statuses.POST_TASK, bind=True, max_retries=None, time_limit=90, soft_time_limit=80)
def post_status(self: Any, status_id: int) -> str:
    settings = get_settings()
    with session_scope() as session:
        post = statuses.prepare(session, status_id, settings)
    if post is None:
        return "nothing to post"
    try:
        response = client.call(post.forge, post.call, settings.forge_timeout_seconds)
    except client.ForgeRejected as exc:
        log.error("forge: status %s (%s) refused, not retried: %s", status_id, post.summary, exc)
        with session_scope() as session:
            statuses.record_failure(session, status_id, post.version, str(exc), permanent=True)
        return "refused"
    except client.ForgeUnavailable as exc:
        with session_scope() as session:
            statuses.record_failure(session, status_id, post.version, str(exc), permanent=False)
        return retry_later(self, settings, f"forge: status {status_id} ({post.summary})", exc, "pending")
    with session_scope() as session:
        statuses.record_sent(session, status_id, post.version)
    log.info("forge: status %s posted: %s (HTTP %s)", status_id, post.summary, response.status_code)
    return "sent"


@celery_app.task(name=comments.COMMENT_TASK, bind=True, max_retries=None, time_limit=90, soft_time_limit=80)
def post_comment(self: Any, pull_request_id: int) -> str:
    started(comments.COMMENT_TASK, pull_request_id)
    settings = get_settings()
    with session_scope() as session:
        pr = forge_sql.lock_pull_request(session, pull_request_id)
        post = comments.prepare(session, pr, settings) if pr is not None else None
        if pr is None or post is None:
            return "nothing to post"
        try:
            comments.record_sent(pr, post, comments.send(post, settings.forge_timeout_seconds))
            return "sent"
        except client.ForgeRejected as exc:
            log.error("forge: comment of pull request #%s of %s refused, not retried: %s", pr.number, post.project, exc)
            comments.record_failure(pr, exc)
            return "refused"
        except client.ForgeUnavailable as exc:
            comments.record_failure(pr, exc)
            error = exc
    return retry_later(self, settings, f"forge: comment of pull request {pull_request_id}", error, "pending")


@celery_app.task(name=RESEND_STATUSES_TASK, time_limit=60, soft_time_limit=50)
def resend_pending() -> int:
    with session_scope() as session:
        return len(statuses.resend_pending(session, get_settings()))


@celery_app.task(name=SETTLE_STATUSES_TASK, time_limit=60, soft_time_limit=50)
def settle_pending() -> int:
    with session_scope() as session:
        return statuses.settle_pending(session, get_settings())
