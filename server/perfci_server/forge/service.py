"""Commit verdicts and their delivery to the forge.

A measured commit's verdict on a machine is ``failure`` while an untriaged regression alert group
of that machine implicates it (the commit lies in the group's range, last good .. first bad),
else ``pending`` while a pending suspect of that machine names it (its confirmation rounds
decide; the CI gate answers ``pending`` too), else ``success``. The verdict is written in the
detection (or triage) transaction; posting it is a Celery task sent after commit, retried with
exponential backoff, and a periodic sweep re-sends whatever is still pending — so a forge outage
delays a status but never loses it (nor the alert, which was committed before any post was
attempted).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from datetime import timedelta

from sqlalchemy.orm import Session

from .. import dispatch
from ..alerts import repository as alert_sql
from ..models import AlertGroup, BenchConfig, CommitState, CommitStatus, Delivery, Forge, Suspect, utcnow
from ..settings import Settings
from . import repository as status_sql
from .client import StatusPost

log = logging.getLogger(__name__)

POST_TASK = "perfci.forge.post_status"
RESEND_BATCH = 500


def record_verdicts(session: Session, machine_id: int, commit_ids: Iterable[int], settings: Settings) -> list[int]:
    """Write the verdict of each commit on the machine; queue a post for each one that changed.

    Set-based: one query for the implicating groups of every commit, one insert of the missing
    status rows, one locking read of them all (commit order, so concurrent batches cannot
    deadlock), and updates only for the verdicts that changed. Returns the ids of the statuses
    that will be posted.
    """
    ids = sorted(set(commit_ids))
    if not ids:
        return []
    context = f"{settings.status_context}/{status_sql.machine_name(session, machine_id)}"
    commits = status_sql.commits_with_repository(session, ids)
    groups_of = alert_sql.implicating_groups_by_commit(session, [c.id for c in commits], machine_id)
    suspects_of: dict[int, list[Suspect]] = {}
    for suspect in alert_sql.pending_suspects(session, ids, [machine_id]):
        for commit_id in {suspect.suspect_commit_id, *suspect.commit_ids}:
            suspects_of.setdefault(commit_id, []).append(suspect)
    base = settings.public_url.rstrip("/") + "/api/v1/alerts" if settings.public_url else None
    named: dict[tuple[int, ...], str] = {}  # a batch's commits mostly share the same few groups
    wanted: dict[int, dict[str, str | None]] = {}
    delivery_of: dict[int, Delivery] = {}
    for commit in commits:
        groups = groups_of.get(commit.id, [])
        if groups:
            key = tuple(g.id for g in groups)
            if key not in named:
                named[key] = _name_regression(session, groups)
            state, description, target_url = CommitState.FAILURE, named[key], f"{base}/{groups[0].id}" if base else None
        elif commit.id in suspects_of:
            state, description, target_url = CommitState.PENDING, _name_suspect(suspects_of[commit.id]), None
        else:
            state, description, target_url = CommitState.SUCCESS, "no untriaged performance regression", None
        wanted[commit.id] = {"state": state.value, "context": context, "description": description, "target_url": target_url}
        delivery_of[commit.id] = Delivery.PENDING if _token(settings, Forge(commit.forge)) else Delivery.DISABLED
    new = status_sql.insert_missing_statuses(session, machine_id, [
        {"repository_id": c.repository_id, "commit_id": c.id, **wanted[c.id], "delivery": delivery_of[c.id].value}
        for c in commits])
    to_post = []
    for status in status_sql.lock_statuses(session, machine_id, list(wanted)):
        fields, delivery = wanted[status.commit_id], delivery_of[status.commit_id]
        if status.commit_id not in new:
            if all(getattr(status, k) == v for k, v in fields.items()):
                continue  # same verdict: nothing to post again
            for key, value in fields.items():
                setattr(status, key, value)
            status.version += 1
            status.delivery, status.last_error = delivery.value, ""
        if delivery is Delivery.PENDING:
            to_post.append(status.id)
    session.flush()
    for status_id in to_post:
        dispatch.send_after_commit(session, POST_TASK, status_id)
    return to_post


def _name_regression(session: Session, groups: list[AlertGroup]) -> str:
    """"regression: ipp +2.9% (self-64B, sim), alert 7" — the largest regressing metric first."""
    alerts = [a for a in alert_sql.alerts_of_groups(session, [g.id for g in groups]) if a.direction == "regression"]
    if not alerts:
        return f"regression: alert {groups[0].id}"
    lead = max(alerts, key=lambda a: abs(a.change_pct) if math.isfinite(a.change_pct) else math.inf)
    config = alert_sql.names(session, BenchConfig, [lead.config_id]).get(lead.config_id, "")
    change = f"{lead.change_pct:+.2f}%" if math.isfinite(lead.change_pct) else "from zero"
    text = f"regression: {lead.metric} {change} ({config}, {lead.backend}), alert {lead.group_id}"
    more = len(alerts) - 1
    if more:
        text += f", +{more} more metric{'s' if more > 1 else ''}"
    return text


def _name_suspect(suspects: list[Suspect]) -> str:
    """"confirming a suspected regression: cpp +2.10%" — the strongest suspect (lowest p) first."""
    lead = min(suspects, key=lambda s: s.p_value)
    text = f"confirming a suspected {lead.direction}: {lead.metric} {lead.change_pct:+.2f}%"
    if len(suspects) > 1:
        text += f", +{len(suspects) - 1} more"
    return text


def _token(settings: Settings, forge: Forge) -> str | None:
    secret = settings.github_token if forge is Forge.GITHUB else settings.gitlab_token
    return secret.get_secret_value() if secret is not None and secret.get_secret_value() else None


# --- delivery (the post task and the resend sweep) ------------------------------------------


def prepare(session: Session, status_id: int, settings: Settings) -> tuple[StatusPost, int] | None:
    """What to post for a status and the version it is, or None when nothing is left to post."""
    row = status_sql.status_for_delivery(session, status_id)
    if row is None:
        return None
    status: CommitStatus = row[0]
    forge = Forge(row.forge)
    token = _token(settings, forge)
    if status.delivery != Delivery.PENDING.value:
        return None
    if token is None:
        status.delivery = Delivery.DISABLED.value
        return None
    api_url = settings.github_api_url if forge is Forge.GITHUB else settings.gitlab_api_url
    post = StatusPost(forge=forge, api_url=api_url, token=token, project=row.name, sha=row.sha,
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
