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
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from sqlalchemy import case, func, literal, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from . import db
from .deps import SessionDep, SettingsDep, require_admin
from .forge.registry import KINDS
from .models import (Agent, CommitStatus, Delivery, Job, JobPurpose, JobState, Machine, PullRequest, Push, Repository, Run,
                     RunStatus, WebhookDelivery, utcnow)
from .settings import Settings, get_settings

log = logging.getLogger(__name__)

WEBHOOK_OUTCOMES = ("scheduled", "ignored", "pong")  # webhook_deliveries.outcome starts with one of them


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
    yield from _jobs(session, now)
    yield from _agents(session)
    yield from _deliveries(session)
    yield from _forge_posts(session, settings, now)
    yield from _detection(session, now)
    incomplete = GaugeMetricFamily("perfci_pushes_incomplete", "Pushes whose commits the server's mirror has not recorded yet")
    incomplete.add_metric([], session.scalar(select(func.count()).select_from(Push).where(Push.complete.is_(False))) or 0)
    yield incomplete


def _machine_names(session: Session) -> dict[int, str]:
    return {machine_id: name for machine_id, name in session.execute(select(Machine.id, Machine.name))}


def _jobs(session: Session, now: datetime) -> Iterator[Metric]:
    queued = GaugeMetricFamily("perfci_jobs_queued", "Jobs waiting for an agent", labels=["machine", "purpose"])
    oldest = GaugeMetricFamily("perfci_jobs_oldest_queued_age_seconds", "Age of the oldest queued job (since it was created)",
                               labels=["machine", "purpose"])
    running = GaugeMetricFamily("perfci_jobs_running", "Jobs an agent holds (leased or running)", labels=["machine"])
    rows = session.execute(
        select(Job.machine_id, Job.state, Job.purpose, func.count(), func.min(Job.created_at))
        .where(Job.state.in_([JobState.QUEUED.value, JobState.LEASED.value, JobState.RUNNING.value]))
        .group_by(Job.machine_id, Job.state, Job.purpose)
    ).all()
    names = _machine_names(session)
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


def _agents(session: Session) -> Iterator[Metric]:
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
    names = _machine_names(session)
    for agent, machine_id, at in session.execute(
            select(Agent.name, Agent.machine_id, Agent.last_seen_at).where(Agent.revoked_at.is_(None), Agent.last_seen_at.is_not(None))):
        key = (agent, names.get(machine_id, str(machine_id)))
        last[key] = max(at, last.get(key, at))
    for key, at in sorted(last.items()):
        seen.add_metric(list(key), at.timestamp())
    yield from (states, seen)


def _deliveries(session: Session) -> Iterator[Metric]:
    total = CounterMetricFamily("perfci_webhook_deliveries", "Webhook deliveries accepted and recorded (redeliveries and "
                                "refused ones are not), by forge and outcome", labels=["forge", "outcome"])
    last = GaugeMetricFamily("perfci_webhook_last_delivery_timestamp_seconds", "When the last recorded delivery arrived, "
                             "as Unix time", labels=["forge"])
    outcome = case(*((WebhookDelivery.outcome.like(f"{name}:%"), literal(name)) for name in WEBHOOK_OUTCOMES),
                   else_=literal("other"))
    rows = session.execute(select(WebhookDelivery.forge, outcome, func.count(), func.max(WebhookDelivery.created_at))
                           .group_by(WebhookDelivery.forge, outcome)).all()
    latest: dict[str, datetime] = {}
    for forge, name, count, at in sorted(rows, key=lambda r: (r[0], r[1])):
        total.add_metric([forge, name], count)
        latest[forge] = max(at, latest.get(forge, at))
    for forge, at in sorted(latest.items()):
        last.add_metric([forge], at.timestamp())
    yield from (total, last)


def _forge_posts(session: Session, settings: Settings, now: datetime) -> Iterator[Metric]:
    posts = GaugeMetricFamily("perfci_forge_posts", "Commit statuses and pull-request comments by delivery: sent, pending "
                              "(queued or being retried), failed, disabled (no token for the forge)", labels=["post", "outcome"])
    counts: dict[tuple[str, str], int] = {(post, d.value): 0 for post in ("status", "comment") for d in Delivery}
    for delivery, count in session.execute(select(CommitStatus.delivery, func.count()).group_by(CommitStatus.delivery)):
        counts["status", delivery] = count
    tokenless = [name for name, kind in KINDS.items() if kind.token(settings) is None]
    comment = case(
        (PullRequest.comment_sent_version == PullRequest.comment_version, literal(Delivery.SENT.value)),
        (Repository.forge.in_(tokenless), literal(Delivery.DISABLED.value)),
        (PullRequest.comment_error != "", literal(Delivery.FAILED.value)),
        else_=literal(Delivery.PENDING.value))
    for delivery, count in session.execute(
            select(comment, func.count()).join(Repository, Repository.id == PullRequest.repository_id)
            .where(PullRequest.comment_version > 0).group_by(comment)):
        counts["comment", delivery] = count
    for key, count in counts.items():
        posts.add_metric(list(key), count)
    oldest = GaugeMetricFamily("perfci_forge_oldest_pending_status_age_seconds", "Time since the longest-pending commit status "
                               "last changed (0: none pending)")
    since = session.scalar(select(func.min(CommitStatus.updated_at)).where(CommitStatus.delivery == Delivery.PENDING.value))
    oldest.add_metric([], max((now - since).total_seconds(), 0.0) if since is not None else 0.0)
    yield from (posts, oldest)


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
