"""Delivery of commit verdicts to the forge.

A verdict (a commit's state and description on a machine, in a scope: ``series`` for the commit
on its branch's series, ``pull`` for a pull request's head) is decided elsewhere — the series
verdict by :mod:`..alerts.verdicts`, a pull request's by :mod:`..pulls.service` — and handed to
:func:`write_verdicts`, which stores it and queues its post when it changed.

The verdict is written in the deciding transaction; posting it is a Celery task sent after
commit, retried with exponential backoff, and a periodic sweep re-sends whatever is still
pending — so a forge outage delays a status but never loses it (nor the alert, which was committed
before any post was attempted). Every status links to its read-only page (``/v/{public_id}``,
:mod:`..pages`) when ``PERFCI_PUBLIC_URL`` is set.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session

from .. import dispatch
from ..models import CommitState, CommitStatus, Delivery, Forge, StatusScope, utcnow
from ..settings import Settings
from . import repository as status_sql
from .client import StatusPost

log = logging.getLogger(__name__)

POST_TASK = "perfci.forge.post_status"
RESEND_BATCH = 500


def write_verdicts(session: Session, machine_id: int, scope: StatusScope, wanted: Mapping[int, tuple[CommitState, str]],
                   settings: Settings) -> list[int]:
    """Store each commit's verdict (state, description) of one scope on the machine; queue a post
    for each that changed. One insert of the missing rows, one locking read of them all (commit
    order, so concurrent batches cannot deadlock), updates only where the verdict changed."""
    if not wanted:
        return []
    machine = status_sql.machine_name(session, machine_id)
    context = f"{settings.status_context}/{machine}" if scope is StatusScope.SERIES else f"{settings.status_context}/pr/{machine}"
    commits = status_sql.commits_with_repository(session, list(wanted))
    delivery_of = {c.id: Delivery.PENDING if token_of(settings, Forge(c.forge)) else Delivery.DISABLED for c in commits}
    new = status_sql.insert_missing_statuses(session, machine_id, [
        {"repository_id": c.repository_id, "commit_id": c.id, "scope": scope.value, "context": context,
         "state": wanted[c.id][0].value, "description": wanted[c.id][1], "delivery": delivery_of[c.id].value,
         "public_id": secrets.token_urlsafe(16)}
        for c in commits])
    to_post = []
    for status in status_sql.lock_statuses(session, machine_id, list(wanted), scope):
        state, description = wanted[status.commit_id]
        fields = {"state": state.value, "context": context, "description": description,
                  "target_url": page_url(settings, status.public_id)}
        delivery = delivery_of[status.commit_id]
        if all(getattr(status, k) == v for k, v in fields.items()):
            if status.commit_id not in new:
                continue  # same verdict: nothing to post again
        else:
            for key, value in fields.items():
                setattr(status, key, value)
            if status.commit_id not in new:
                status.version += 1
                status.delivery, status.last_error = delivery.value, ""
        if delivery is Delivery.PENDING:
            to_post.append(status.id)
    session.flush()
    for status_id in to_post:
        dispatch.send_after_commit(session, POST_TASK, status_id)
    return to_post


def statuses_of(session: Session, commit_id: int, scope: StatusScope) -> list[CommitStatus]:
    return status_sql.statuses_of(session, commit_id, scope)


def page_url(settings: Settings, public_id: str) -> str | None:
    """The read-only page of a verdict, as a browser reaches it (None without PERFCI_PUBLIC_URL)."""
    return f"{settings.public_url.rstrip('/')}/v/{public_id}" if settings.public_url else None


def change_text(change_pct: float) -> str:
    """"+2.90%", or "from zero" where a count starts at zero."""
    return f"{change_pct:+.2f}%" if math.isfinite(change_pct) else "from zero"


def token_of(settings: Settings, forge: Forge) -> str | None:
    secret = {Forge.GITHUB: settings.github_token, Forge.GITLAB: settings.gitlab_token, Forge.GITEA: settings.gitea_token}[forge]
    return secret.get_secret_value() if secret is not None and secret.get_secret_value() else None


def api_url(settings: Settings, forge: Forge) -> str:
    return {Forge.GITHUB: settings.github_api_url, Forge.GITLAB: settings.gitlab_api_url, Forge.GITEA: settings.gitea_api_url}[forge]


# --- delivery (the post task and the resend sweep) ------------------------------------------


def prepare(session: Session, status_id: int, settings: Settings) -> tuple[StatusPost, int] | None:
    """What to post for a status and the version it is, or None when nothing is left to post."""
    row = status_sql.status_for_delivery(session, status_id)
    if row is None:
        return None
    status: CommitStatus = row[0]
    forge = Forge(row.forge)
    token = token_of(settings, forge)
    if status.delivery != Delivery.PENDING.value:
        return None
    if token is None:
        status.delivery = Delivery.DISABLED.value
        return None
    post = StatusPost(forge=forge, api_url=api_url(settings, forge), token=token, project=row.name, sha=row.sha,
                      state=CommitState(status.state), context=status.context, description=status.description,
                      target_url=status.target_url)
    return post, status.version


def record_sent(session: Session, status_id: int, version: int) -> None:
    status = status_sql.lock_by_id(session, status_id)
    if status is None:
        return
    status.attempts += 1
    status.sent_version = version
    if status.version == version:  # a newer verdict has its own post queued
        status.delivery, status.sent_at, status.last_error = Delivery.SENT.value, utcnow(), ""


def record_failure(session: Session, status_id: int, version: int, error: str, permanent: bool) -> None:
    status = status_sql.lock_by_id(session, status_id)
    if status is None:
        return
    status.attempts += 1
    status.last_error = error[:2000]
    if permanent and status.version == version:
        status.delivery = Delivery.FAILED.value


def retry_later(task: Any, settings: Settings, what: str, error: Exception, used_up: str) -> str:
    """Retry ``task`` after the backoff (doubling, capped) while it has retries left; then say so
    and answer ``used_up``: the sweep that goes with the task takes over."""
    retries = task.request.retries
    if retries >= settings.forge_max_retries:
        log.warning("%s: %s; retries used up, the sweep takes over", what, error)
        return used_up
    delay = retry_delay(settings, retries)
    log.warning("%s: %s; retry %d in %.1f s", what, error, retries + 1, delay)
    raise task.retry(countdown=delay, exc=error)


def retry_delay(settings: Settings, retries: int) -> float:
    return min(settings.forge_retry_backoff_seconds * 2 ** retries, settings.forge_retry_backoff_max_seconds)


def resend_pending(session: Session, settings: Settings) -> list[int]:
    """Statuses still pending after a quiet interval (their task was lost or gave up): post again."""
    ids = status_sql.stale_pending(session, utcnow() - timedelta(seconds=settings.forge_resend_interval_seconds), RESEND_BATCH)
    for status_id in ids:
        dispatch.send_after_commit(session, POST_TASK, status_id)
    if ids:
        log.info("forge: re-sending %d pending commit status(es)", len(ids))
    return ids
