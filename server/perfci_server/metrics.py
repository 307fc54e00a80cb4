"""``GET /metrics``: what an operator watches, in Prometheus's text format (docs/operations.md,
"/metrics").

The API runs as several processes and the Celery worker as others, so nothing is counted in
memory: each scrape reads the database (a custom collector, a handful of queries that use the
tables' indexes) and every process answers the same. Who may read it: anyone in development; else
the bearer of ``PERFCI_METRICS_TOKEN`` (a token that opens nothing else, for Prometheus) or of an
admin or API token, as for every read.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from sqlalchemy import case, func, literal, select, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from . import db
from .deps import SessionDep, SettingsDep, require_admin
from .forge.registry import KINDS
from .models import (Agent, CommitStatus, Delivery, Job, JobPurpose, JobState, Machine, PullRequest, Push, Repository, Run,
                     RunStatus, WebhookDelivery, utcnow)
from .models.pull_request import COMMENT_UNSENT
from .settings import Settings, get_settings

log = logging.getLogger(__name__)

WEBHOOK_OUTCOMES = ("scheduled", "ignored", "pong")  # webhook_deliveries.outcome starts with one of them
# Deliveries and posts are history that only grows: a scrape counts the last hour's (through indexes), not all.
RECENT = timedelta(hours=1)


class DatabaseCollector(Collector):
    """Every metric, read from the database when Prometheus asks."""

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("perfci_database_up", "1 when the database answered this scrape's queries, else 0")
        try:
            with db.session_scope() as session:
                families = list(_families(session, get_settings(), utcnow()))
        except SQLAlchemyError as exc:
            log.warning("metrics: the database did not answer: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families


def _families(session: Session, settings: Settings, now: datetime) -> Iterator[Metric]:
    machines = {machine_id: name for machine_id, name in session.execute(select(Machine.id, Machine.name))}
    yield from _jobs(session, machines, now)
    yield from _agents(session, machines)
    since = now - RECENT
    yield from _deliveries(session, since)
    yield from _forge_posts(session, settings, since, now)
    yield from _detection(session, now)
    incomplete = GaugeMetricFamily("perfci_pushes_incomplete", "Pushes whose commits the server's mirror has not recorded yet")
    incomplete.add_metric([], session.scalar(select(func.count()).select_from(Push).where(~Push.complete)) or 0)  # partial index
    yield incomplete


def _jobs(session: Session, names: dict[int, str], now: datetime) -> Iterator[Metric]:
    queued = GaugeMetricFamily("perfci_jobs_queued", "Jobs waiting for an agent", labels=["machine", "purpose"])
    oldest = GaugeMetricFamily("perfci_jobs_oldest_queued_age_seconds", "Age of the oldest queued job (since it was created)",
                               labels=["machine", "purpose"])
    running = GaugeMetricFamily("perfci_jobs_running", "Jobs an agent holds (leased or running)", labels=["machine"])
    rows = session.execute(
        select(Job.machine_id, Job.state, Job.purpose, func.count(), func.min(Job.created_at))
        .where(Job.state.in_([JobState.QUEUED.value, JobState.LEASED.value, JobState.RUNNING.value]))
        .group_by(Job.machine_id, Job.state, Job.purpose)
    ).all()
    # every machine's count, 0 included: a series that vanishes when its queue drains reads as "unknown"
    counts: dict[tuple[str, str], int] = {(machine, p.value): 0 for machine in names.values() for p in JobPurpose}
    firsts: dict[tuple[str, str], datetime] = {}
    held: dict[str, int] = {machine: 0 for machine in names.values()}
    for machine_id, state, purpose, count, first in rows:
        machine = names.get(machine_id, str(machine_id))
        if state == JobState.QUEUED.value:
            counts[machine, purpose] = counts.get((machine, purpose), 0) + count
            firsts[machine, purpose] = min(first, firsts.get((machine, purpose), first))
        else:
            held[machine] = held.get(machine, 0) + count
    for key, count in sorted(counts.items()):
        queued.add_metric(list(key), count)
    for key, first in sorted(firsts.items()):
        oldest.add_metric(list(key), max((now - first).total_seconds(), 0.0))
    for machine, count in sorted(held.items()):
        running.add_metric([machine], count)
    yield from (queued, oldest, running)


def _agents(session: Session, names: dict[int, str]) -> Iterator[Metric]:
    states = GaugeMetricFamily("perfci_agents", "Agents by state: active (claims jobs), stopped (its host no longer matches "
                               "its machine), revoked", labels=["state"])
    seen = GaugeMetricFamily("perfci_agent_last_seen_timestamp_seconds", "When an agent (not revoked) last called the server, "
                             "as Unix time", labels=["agent", "machine"])
    state = case((Agent.revoked_at.is_not(None), literal("revoked")), (Agent.stopped_claiming.is_not(None), literal("stopped")),
                 else_=literal("active"))
    counts = {name: count for name, count in session.execute(select(state, func.count()).group_by(state))}
    for name in ("active", "stopped", "revoked"):
        states.add_metric([name], counts.get(name, 0))
    last: dict[tuple[str, str], datetime] = {}
    for agent, machine_id, at in session.execute(
            select(Agent.name, Agent.machine_id, Agent.last_seen_at).where(Agent.revoked_at.is_(None), Agent.last_seen_at.is_not(None))):
        key = (agent, names.get(machine_id, str(machine_id)))
        last[key] = max(at, last.get(key, at))
    for key, at in sorted(last.items()):
        seen.add_metric(list(key), at.timestamp())
    yield from (states, seen)


def _deliveries(session: Session, since: datetime) -> Iterator[Metric]:
    recent = GaugeMetricFamily("perfci_webhook_deliveries_last_hour", "Webhook deliveries recorded in the last hour (refused "
                               "ones and redeliveries are not), by forge and outcome", labels=["forge", "outcome"])
    last = GaugeMetricFamily("perfci_webhook_last_delivery_timestamp_seconds", "When the forge's last recorded delivery "
                             "arrived, as Unix time (none: no delivery yet)", labels=["forge"])
    counts = {(forge, name): 0 for forge in KINDS for name in WEBHOOK_OUTCOMES}
    outcome = case(*((WebhookDelivery.outcome.like(f"{name}:%"), literal(name)) for name in WEBHOOK_OUTCOMES),
                   else_=literal("other"))
    for forge, name, count in session.execute(  # the index (forge, created_at): each forge's last hour only
            select(WebhookDelivery.forge, outcome, func.count())
            .where(WebhookDelivery.forge.in_(list(KINDS)), WebhookDelivery.created_at >= since)
            .group_by(WebhookDelivery.forge, outcome)):
        counts[forge, name] = count
    for key, count in sorted(counts.items()):
        recent.add_metric(list(key), count)
    latest = session.execute(select(*(select(func.max(WebhookDelivery.created_at)).where(WebhookDelivery.forge == forge)
                                      .scalar_subquery() for forge in KINDS))).one()
    for forge, at in zip(KINDS, latest):
        if at is not None:
            last.add_metric([forge], at.timestamp())
    yield from (recent, last)


def _forge_posts(session: Session, settings: Settings, since: datetime, now: datetime) -> Iterator[Metric]:
    """Statuses by their delivery column; a comment by its pull request's columns (sent: its version is the one
    sent; disabled: no token for its forge; failed: its last post failed, whether it is retried or refused; else
    pending)."""
    recent = GaugeMetricFamily("perfci_forge_posts_last_hour", "Commit statuses and pull-request comments whose delivery "
                               "changed in the last hour, by where it stands: sent, pending (queued or being retried), failed, "
                               "disabled (no token for the forge)", labels=["post", "outcome"])
    waiting = GaugeMetricFamily("perfci_forge_posts_pending", "Commit statuses and pull-request comments waiting to be "
                                "posted, whatever their age", labels=["post"])
    counts: dict[tuple[str, str], int] = {(post, d.value): 0 for post in ("status", "comment") for d in Delivery}
    for delivery, count in session.execute(  # the index (delivery, updated_at)
            select(CommitStatus.delivery, func.count())
            .where(CommitStatus.delivery.in_([d.value for d in Delivery]), CommitStatus.updated_at >= since)
            .group_by(CommitStatus.delivery)):
        counts["status", delivery] = count
    tokenless = [name for name, kind in KINDS.items() if kind.token(settings) is None]
    comment = case(
        (PullRequest.comment_sent_version == PullRequest.comment_version, literal(Delivery.SENT.value)),
        (Repository.forge.in_(tokenless), literal(Delivery.DISABLED.value)),
        (PullRequest.comment_error != "", literal(Delivery.FAILED.value)),
        else_=literal(Delivery.PENDING.value))
    for delivery, count in session.execute(  # the index on updated_at
            select(comment, func.count()).join(Repository, Repository.id == PullRequest.repository_id)
            .where(PullRequest.comment_version > 0, PullRequest.updated_at >= since).group_by(comment)):
        counts["comment", delivery] = count
    for key, count in counts.items():
        recent.add_metric(list(key), count)
    statuses_pending, oldest_pending = session.execute(
        select(func.count(), func.min(CommitStatus.updated_at)).where(CommitStatus.delivery == Delivery.PENDING.value)).one()
    comments_pending = session.scalar(  # the partial index of unsent comments; a failed one waits for its retry too
        select(func.count()).select_from(PullRequest).join(Repository, Repository.id == PullRequest.repository_id)
        .where(text(COMMENT_UNSENT), Repository.forge.not_in(tokenless)))
    waiting.add_metric(["status"], statuses_pending or 0)
    waiting.add_metric(["comment"], comments_pending or 0)
    oldest = GaugeMetricFamily("perfci_forge_oldest_pending_status_age_seconds", "Time since the longest-pending commit status "
                               "last changed (0: none pending)")
    oldest.add_metric([], max((now - oldest_pending).total_seconds(), 0.0) if oldest_pending is not None else 0.0)
    yield from (recent, waiting, oldest)


def _detection(session: Session, now: datetime) -> Iterator[Metric]:
    waiting = GaugeMetricFamily("perfci_runs_awaiting_detection", "Stored successful runs detection has not analysed yet")
    lag = GaugeMetricFamily("perfci_detection_lag_seconds", "Age of the oldest stored run detection has not analysed yet "
                            "(0: none waiting)")
    count, oldest = session.execute(
        select(func.count(), func.min(Run.received_at)).where(Run.status == RunStatus.OK.value, Run.detected_at.is_(None))).one()
    waiting.add_metric([], count or 0)
    lag.add_metric([], max((now - oldest).total_seconds(), 0.0) if oldest is not None else 0.0)
    yield from (waiting, lag)


REGISTRY = CollectorRegistry()
REGISTRY.register(DatabaseCollector())

_bearer = HTTPBearer(auto_error=False, scheme_name="MetricsToken", description="PERFCI_METRICS_TOKEN, or an admin/API token")


def require_metrics_reader(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    if not settings.reads_require_token:
        return
    wanted = settings.metrics_token
    if credentials is not None and wanted is not None and hmac.compare_digest(
            credentials.credentials.encode(), wanted.get_secret_value().encode()):
        return
    require_admin(request, session, settings, credentials)


router = APIRouter()


@router.get("/metrics", include_in_schema=False, dependencies=[Depends(require_metrics_reader)])
def metrics() -> Any:
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
