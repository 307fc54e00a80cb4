"""Celery tasks of the pull-request domain: prepare a new head (mirror fetch, merge-base, jobs),
decide after its jobs end, post the one comment. They take ids and own their transactions; the
HTTP calls and the fetch happen outside any, except the comment's first post (below)."""

from __future__ import annotations

import logging
from typing import Any

from ..celery_app import celery_app
from ..db import session_scope
from ..dispatch import started
from ..forge import client
from ..forge import service as forge_service
from ..repos import mirror
from ..settings import get_settings
from . import repository as pull_sql
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
    except mirror.MirrorUnavailable as exc:
        with session_scope() as session:
            service.note_waiting(session, pull_request_id, target.head_sha, str(exc))
        return forge_service.retry_later(self, settings, f"pull request {pull_request_id}", exc, "waiting")
    with session_scope() as session:
        return service.schedule(session, target, sides, settings)


@celery_app.task(name=service.EVALUATE_TASK, time_limit=120, soft_time_limit=110)
def evaluate(pull_request_id: int) -> str:
    started(service.EVALUATE_TASK, pull_request_id)
    with session_scope() as session:
        return service.evaluate(session, pull_request_id, get_settings())


@celery_app.task(name=service.COMMENT_TASK, bind=True, max_retries=None, time_limit=90, soft_time_limit=80)
def post_comment(self: Any, pull_request_id: int) -> str:
    """Create or edit the comment. The pull request's row stays locked while the forge answers,
    so two posts of one pull request never both create a comment (bounded by the forge timeout)."""
    started(service.COMMENT_TASK, pull_request_id)
    settings = get_settings()
    with session_scope() as session:
        pr = pull_sql.lock(session, pull_request_id)
        post = service.comment_post(session, pr, settings) if pr is not None else None
        if pr is None or post is None:
            return "nothing to post"
        version = pr.comment_version
        try:
            pr.comment_id = client.send_comment(post, settings.forge_timeout_seconds)
        except client.ForgeRejected as exc:
            log.error("comment of pull request %s refused, not retried: %s", pull_request_id, exc)
            pr.comment_error = str(exc)[:2000]
            return "refused"
        except client.ForgeUnavailable as exc:
            pr.comment_error = str(exc)[:2000]
            error = exc
        else:
            pr.comment_sent_version, pr.comment_error = version, ""
            log.info("comment of pull request %s posted (comment %s, version %d)", pull_request_id, pr.comment_id, version)
            return "sent"
    return forge_service.retry_later(self, settings, f"comment of pull request {pull_request_id}", error, "pending")
