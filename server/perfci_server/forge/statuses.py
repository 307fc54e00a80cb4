"""Commit statuses: the verdicts perfci posts on the forge, stored first, then delivered.

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
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.orm import Session

from .. import dispatch
from ..machines import repository as machine_sql
from ..models import CommitState, CommitStatus, Delivery, StatusScope, utcnow
from ..settings import Settings
from . import repository as status_sql
from .kind import ApiCall
from .registry import kind_of

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
    machine = machine_sql.name_of(session, machine_id)
    context = f"{settings.status_context}/{machine}" if scope is StatusScope.SERIES else f"{settings.status_context}/pr/{machine}"
    commits = status_sql.commits_with_repository(session, list(wanted))
    delivery_of = {c.id: Delivery.PENDING if kind_of(c.forge).token(settings) else Delivery.DISABLED for c in commits}
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


# --- delivery (the post task and the resend sweep) ------------------------------------------


@dataclass(frozen=True)
class StatusPost:
    """One status to post: the call, and what the log says of it."""

    forge: str
    call: ApiCall
    version: int
    summary: str  # "failure perfci/m1 on 1a2b3c4d5e6f of owner/repo"


def prepare(session: Session, status_id: int, settings: Settings) -> StatusPost | None:
    """What to post for a status, or None when nothing is left to post."""
    row = status_sql.status_for_delivery(session, status_id)
    if row is None:
        return None
    status: CommitStatus = row[0]
    if status.delivery != Delivery.PENDING.value:
        return None
    kind = kind_of(row.forge)
    token = kind.token(settings)
    if token is None:
        status.delivery = Delivery.DISABLED.value
        return None
    call = kind.status_call(kind.api_url(settings), token, row.name, row.sha, status.state, status.context,
                            status.description, status.target_url)
    return StatusPost(kind.name, call, status.version, f"{status.state} {status.context} on {row.sha[:12]} of {row.name}")


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


def resend_pending(session: Session, settings: Settings) -> list[int]:
    """Statuses still pending after a quiet interval (their task was lost or gave up): post again."""
    ids = status_sql.stale_pending(session, utcnow() - timedelta(seconds=settings.forge_resend_interval_seconds), RESEND_BATCH)
    for status_id in ids:
        dispatch.send_after_commit(session, POST_TASK, status_id)
    if ids:
        log.info("forge: re-sending %d pending commit status(es)", len(ids))
    return ids
