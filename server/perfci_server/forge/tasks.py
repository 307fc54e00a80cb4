"""Celery tasks of the forge room: post one commit status or one pull-request comment (retried
with backoff), re-send pending statuses (beat). A status's HTTP call happens under its post lock
(an advisory lock, the row stays free for the deciders), so the posts of one status reach the
forge one at a time, newest verdict last; a comment's while its pull request's row is locked, so
two posts of one pull request never both create a comment (both bounded by the forge timeout).
Each attempt writes one line: forge, repository, sha, what was posted, its outcome and the
forge's HTTP status (logs.py)."""

from __future__ import annotations

import logging
from typing import Any

from ..celery_app import SETTLE_STATUSES_TASK, RESEND_STATUSES_TASK, celery_app
from ..db import session_scope
from ..dispatch import retry_later, started
from ..logs import fields
from ..settings import get_settings
from . import client, comments, statuses
from . import repository as forge_sql

log = logging.getLogger(__name__)


@celery_app.task(name=statuses.POST_TASK, bind=True, max_retries=None, time_limit=90, soft_time_limit=80)
def post_status(self: Any, status_id: int) -> str:
    settings = get_settings()
    with session_scope() as session:
        forge_sql.serialise_posts(session, status_id)
        post = statuses.prepare(session, status_id, settings)
        if post is None:
            return "nothing to post"
        line = {"post": "status", "forge": post.forge, "repository": post.repository, "sha": post.sha, "context": post.context,
                "state": post.state, "status_id": status_id, "version": post.version}
        try:
            response = client.call(post.forge, post.call, settings.forge_timeout_seconds)
        except client.ForgeRejected as exc:
            log.error("forge post", extra=fields(**line, outcome="refused", http_status=exc.status, error=str(exc)))
            statuses.record_failure(session, status_id, post.version, str(exc), permanent=True)
            return "refused"
        except client.ForgeUnavailable as exc:
            log.warning("forge post", extra=fields(**line, outcome="unavailable", http_status=exc.status, error=str(exc)))
            statuses.record_failure(session, status_id, post.version, str(exc), permanent=False)
            error = exc
        else:
            statuses.record_sent(session, status_id, post.version)
            log.info("forge post", extra=fields(**line, outcome="sent", http_status=response.status_code))
            return "sent"
    return retry_later(self, settings, f"forge: status {status_id} ({post.summary})", error, "pending")


@celery_app.task(name=comments.COMMENT_TASK, bind=True, max_retries=None, time_limit=90, soft_time_limit=80)
def post_comment(self: Any, pull_request_id: int) -> str:
    started(comments.COMMENT_TASK, pull_request_id)
    settings = get_settings()
    with session_scope() as session:
        pr = forge_sql.lock_pull_request(session, pull_request_id)
        post = comments.prepare(session, pr, settings) if pr is not None else None
        if pr is None or post is None:
            return "nothing to post"
        line = {"post": "comment", "forge": post.kind.name, "repository": post.project, "sha": post.sha,
                "pull_request": post.number, "comment_id": post.comment_id, "version": post.version}
        try:
            comment_id, http_status = comments.send(post, settings.forge_timeout_seconds)
            comments.record_sent(pr, post, comment_id)
            log.info("forge post", extra=fields(**{**line, "comment_id": comment_id}, outcome="sent", http_status=http_status))
            return "sent"
        except client.ForgeRejected as exc:
            log.error("forge post", extra=fields(**line, outcome="refused", http_status=exc.status, error=str(exc)))
            comments.record_failure(pr, exc)
            return "refused"
        except client.ForgeUnavailable as exc:
            log.warning("forge post", extra=fields(**line, outcome="unavailable", http_status=exc.status, error=str(exc)))
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
