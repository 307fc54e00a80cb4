"""Commit statuses: the verdicts perfci posts on the forge, stored first, then delivered.

A verdict (a commit's state and description on a machine, about a :class:`Subject`: the commit on
its branch's series, or a pull request's head against its base) is decided elsewhere — the series
verdict by :mod:`..alerts.verdicts` (and ``pending`` by the jobs room when a commit's measurement
is queued), a pull request's by :mod:`..pulls.service` — and handed to :func:`write_verdicts`,
which stores it and queues its post when it changed. Each subject has its own context:
``perfci/<machine>`` on the series, ``perfci/pr/<machine>/<base branch>`` for a pull request.

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


@dataclass(frozen=True)
class Subject:
    """What a verdict judges: the commit on its branch's series, or a pull request's head against
    its base branch."""

    scope: StatusScope = StatusScope.SERIES
    base_branch: str = ""
    pull_request_id: int | None = None

    def context(self, settings: Settings, machine: str) -> str:
        if self.scope is StatusScope.SERIES:
            return f"{settings.status_context}/{machine}"
        return f"{settings.status_context}/pr/{machine}/{self.base_branch}"


SERIES = Subject()


def pull_subject(pull_request_id: int, base_branch: str) -> Subject:
    return Subject(StatusScope.PULL, base_branch, pull_request_id)


def write_verdicts(session: Session, machine_id: int, subject: Subject, wanted: Mapping[int, tuple[CommitState, str]],
                   settings: Settings) -> list[int]:
    """Store each commit's verdict (state, description) about one subject on the machine; queue a
    post for each that changed. One insert of the missing rows, one locking read of them all
    (commit order, so concurrent batches cannot deadlock), updates only where the verdict changed."""
    if not wanted:
        return []
    context = subject.context(settings, machine_sql.name_of(session, machine_id))[:255]
    commits = status_sql.commits_with_repository(session, list(wanted))
    delivery_of = {c.id: Delivery.PENDING if kind_of(c.forge).token(settings) else Delivery.DISABLED for c in commits}
    new = status_sql.insert_missing_statuses(session, machine_id, [
        {"repository_id": c.repository_id, "commit_id": c.id, "scope": subject.scope.value, "context": context,
         "base_branch": subject.base_branch, "pull_request_id": subject.pull_request_id,
         "state": wanted[c.id][0].value, "description": wanted[c.id][1][:255], "delivery": delivery_of[c.id].value,
         "public_id": secrets.token_urlsafe(16)}
        for c in commits])
    to_post = []
    for status in status_sql.lock_statuses(session, machine_id, list(wanted), subject.scope, subject.base_branch):
        state, description = wanted[status.commit_id]
        fields = {"state": state.value, "context": context, "description": description[:255],
                  "target_url": page_url(settings, status.public_id), "pull_request_id": subject.pull_request_id}
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


def statuses_of(session: Session, commit_id: int, subject: Subject) -> list[CommitStatus]:
    """The commit's verdicts about the subject, one per machine."""
    return status_sql.statuses_of(session, commit_id, subject.scope, subject.base_branch)


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
    repository: str
    sha: str
    context: str
    state: str


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
    return StatusPost(kind.name, call, status.version, f"{status.state} {status.context} on {row.sha[:12]} of {row.name}",
                      row.name, row.sha, status.context, status.state)


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
    ids = status_sql.undelivered(session, utcnow() - timedelta(seconds=settings.forge_resend_interval_seconds), RESEND_BATCH)
    for status_id in ids:
        dispatch.send_after_commit(session, POST_TASK, status_id)
    if ids:
        log.info("forge: re-sending %d pending commit status(es)", len(ids))
    return ids


def settle_pending(session: Session, settings: Settings) -> int:
    """The sweep that makes every status end. A ``pending`` verdict whose commit has had nothing
    queued or running on its machine for ``status_settle_seconds`` waits on nothing of its own: its
    decider is asked again (the series verdict by the alerts room, a pull request's by the pull
    request room, by task name); a pull request's verdict on a head that is no longer the pull
    request's ends here, as ``neutral``. Returns how many were settled or asked about."""
    quiet_since = utcnow() - timedelta(seconds=settings.status_settle_seconds)
    series: dict[int, list[int]] = {}
    pulls: set[int] = set()
    rows = status_sql.unsettled(session, quiet_since, RESEND_BATCH)
    for status in rows:
        if status.scope == StatusScope.SERIES.value:
            series.setdefault(status.machine_id, []).append(status.commit_id)
            continue
        head = status_sql.pull_head(session, status.pull_request_id)
        if head == status.commit_id:
            pulls.add(status.pull_request_id)  # type: ignore[arg-type]
            continue
        subject = Subject(StatusScope.PULL, status.base_branch, status.pull_request_id)
        ended = (CommitState.NEUTRAL, "superseded before it was measured: the pull request has another head")
        write_verdicts(session, status.machine_id, subject, {status.commit_id: ended}, settings)
    for machine_id, commit_ids in sorted(series.items()):
        dispatch.send_after_commit(session, dispatch.DECIDE_SERIES_TASK, machine_id, sorted(commit_ids))
    for pull_request_id in sorted(pulls):
        dispatch.send_once_after_commit(session, dispatch.PULL_EVALUATE_TASK, pull_request_id)
    if rows:
        log.info("forge: %d pending status(es) with nothing of their own running: decided again", len(rows))
    return len(rows)
