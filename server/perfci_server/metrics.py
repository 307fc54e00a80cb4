"""``GET /metrics``: what an operator watches, in Prometheus's text format (docs/operations.md,
"/metrics").

The API runs as several processes and the Celery worker as others, so nothing is counted in
memory: each scrape reads the database (a custom collector) and every process answers the same.
A scrape is six statements, each through an index or over a small table (machines, agents): what
waits now (jobs, posts, runs, pushes) and the last hour of the history that only grows
(deliveries, posts), never whole history tables (benchmarks/metrics/scrape.py prints the plans).
Who may read it: anyone in development; else the bearer of ``PERFCI_METRICS_TOKEN`` (a token that
opens nothing else, for Prometheus) or of an admin or API token, as for every read.
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
from sqlalchemy import Row, case, func, literal, select, text
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
# Deliveries and posts are history that only grows: a scrape counts the last hour's, not all of them.
RECENT = timedelta(hours=1)
POSTS = ("status", "comment")


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
    tokenless = [name for name, kind in KINDS.items() if kind.token(settings) is None]
    single = _single_values(session, tokenless)
    machines = {machine_id: name for machine_id, name in session.execute(select(Machine.id, Machine.name))}
    yield from _jobs(session, machines, now)
    yield from _agents(session, machines)
    yield from _deliveries(session, single, now - RECENT)
    yield from _forge_posts(session, single, tokenless, now - RECENT, now)
    yield from _detection(single, now)
    incomplete = GaugeMetricFamily("perfci_pushes_incomplete", "Pushes whose commits the server's mirror has not recorded yet")
    incomplete.add_metric([], single.pushes_incomplete)
    yield incomplete


def _age(now: datetime, since: datetime | None) -> float:
    return max((now - since).total_seconds(), 0.0) if since is not None else 0.0


def _single_values(session: Session, tokenless: list[str]) -> Row[Any]:
    """Each single number of the scrape, in one statement: each subquery reads one index."""
    ok_undetected = (Run.status == RunStatus.OK.value, Run.detected_at.is_(None))  # ix_runs_detection_pending
    pending = CommitStatus.delivery == Delivery.PENDING.value  # ix_commit_statuses_delivery_updated_at
    last_delivery = {f"last_{forge}": select(func.max(WebhookDelivery.created_at)).where(WebhookDelivery.forge == forge)
                     .scalar_subquery() for forge in KINDS}  # ix_webhook_deliveries_forge_created_at, backwards
    return session.execute(select(
        select(func.count()).select_from(Push).where(~Push.complete).scalar_subquery().label("pushes_incomplete"),
        select(func.count()).select_from(Run).where(*ok_undetected).scalar_subquery().label("runs_waiting"),
        select(func.min(Run.received_at)).where(*ok_undetected).scalar_subquery().label("oldest_run"),
        select(func.count()).select_from(CommitStatus).where(pending).scalar_subquery().label("statuses_pending"),
        select(func.min(CommitStatus.updated_at)).where(pending).scalar_subquery().label("oldest_status"),
        select(func.count()).select_from(PullRequest).join(Repository, Repository.id == PullRequest.repository_id)
        .where(text(COMMENT_UNSENT), Repository.forge.not_in(tokenless))  # ix_pull_requests_comment_unsent
        .scalar_subquery().label("comments_pending"),
        *(query.label(name) for name, query in last_delivery.items()),
    )).one()


def _jobs(session: Session, names: dict[int, str], now: datetime) -> Iterator[Metric]:
    queued = GaugeMetricFamily("perfci_jobs_queued", "Jobs waiting for an agent", labels=["machine", "purpose"])
    oldest = GaugeMetricFamily("perfci_jobs_oldest_queued_age_seconds", "Age of the oldest queued job (since it was created)",
                               labels=["machine", "purpose"])
    running = GaugeMetricFamily("perfci_jobs_running", "Jobs an agent holds (leased or running)", labels=["machine"])
    # every machine's count, 0 included: a series that vanishes when its queue drains reads as "unknown"
    counts: dict[tuple[str, str], int] = {(machine, p.value): 0 for machine in names.values() for p in JobPurpose}
    firsts: dict[tuple[str, str], datetime] = {}
    held: dict[str, int] = {machine: 0 for machine in names.values()}
    for machine_id, state, purpose, count, first in session.execute(  # ix_jobs_state_lease_expires_at
            select(Job.machine_id, Job.state, Job.purpose, func.count(), func.min(Job.created_at))
            .where(Job.state.in_([JobState.QUEUED.value, JobState.LEASED.value, JobState.RUNNING.value]))
            .group_by(Job.machine_id, Job.state, Job.purpose)):
        machine = names.get(machine_id, str(machine_id))
        if state == JobState.QUEUED.value:
            counts[machine, purpose] = counts.get((machine, purpose), 0) + count
            firsts[machine, purpose] = min(first, firsts.get((machine, purpose), first))
        else:
            held[machine] = held.get(machine, 0) + count
    for key, count in sorted(counts.items()):
        queued.add_metric(list(key), count)
    for key, first in sorted(firsts.items()):
        oldest.add_metric(list(key), _age(now, first))
    for machine, count in sorted(held.items()):
        running.add_metric([machine], count)
    yield from (queued, oldest, running)


def _agents(session: Session, names: dict[int, str]) -> Iterator[Metric]:
    states = GaugeMetricFamily("perfci_agents", "Agents by state: active (claims jobs), stopped (its host no longer matches "
                               "its machine), revoked", labels=["state"])
    seen = GaugeMetricFamily("perfci_agent_last_seen_timestamp_seconds", "When an agent (not revoked) last called the server, "
                             "as Unix time", labels=["agent", "machine"])
    counts = {"active": 0, "stopped": 0, "revoked": 0}
    last: dict[tuple[str, str], datetime] = {}
    for agent, machine_id, at, revoked, stopped in session.execute(  # one row per agent: a small table
            select(Agent.name, Agent.machine_id, Agent.last_seen_at, Agent.revoked_at, Agent.stopped_claiming)):
        counts["revoked" if revoked is not None else "stopped" if stopped is not None else "active"] += 1
        if revoked is None and at is not None:
            key = (agent, names.get(machine_id, str(machine_id)))
            last[key] = max(at, last.get(key, at))
    for state, count in counts.items():
        states.add_metric([state], count)
    for key, at in sorted(last.items()):
        seen.add_metric(list(key), at.timestamp())
    yield from (states, seen)


def _deliveries(session: Session, single: Row[Any], since: datetime) -> Iterator[Metric]:
    recent = GaugeMetricFamily("perfci_webhook_deliveries_last_hour", "Webhook deliveries recorded in the last hour (refused "
                               "ones and redeliveries are not), by forge and outcome", labels=["forge", "outcome"])
    last = GaugeMetricFamily("perfci_webhook_last_delivery_timestamp_seconds", "When the forge's last recorded delivery "
                             "arrived, as Unix time (none: no delivery yet)", labels=["forge"])
    counts = {(forge, name): 0 for forge in KINDS for name in WEBHOOK_OUTCOMES}
    outcome = case(*((WebhookDelivery.outcome.like(f"{name}:%"), literal(name)) for name in WEBHOOK_OUTCOMES),
                   else_=literal("other"))
    for forge, name, count in session.execute(  # ix_webhook_deliveries_forge_created_at: each forge's last hour only
            select(WebhookDelivery.forge, outcome, func.count())
            .where(WebhookDelivery.forge.in_(list(KINDS)), WebhookDelivery.created_at >= since)
            .group_by(WebhookDelivery.forge, outcome)):
        counts[forge, name] = count
    for key, count in sorted(counts.items()):
        recent.add_metric(list(key), count)
    for forge in KINDS:
        at = getattr(single, f"last_{forge}")
        if at is not None:
            last.add_metric([forge], at.timestamp())
    yield from (recent, last)


def _forge_posts(session: Session, single: Row[Any], tokenless: list[str], since: datetime, now: datetime) -> Iterator[Metric]:
    """Statuses by their delivery column; a comment by its pull request's columns (sent: its version is the one
    sent; disabled: no token for its forge; failed: its last post failed, whether it is retried or refused; else
    pending)."""
    recent = GaugeMetricFamily("perfci_forge_posts_last_hour", "Commit statuses and pull-request comments whose delivery "
                               "changed in the last hour, by where it stands: sent, pending (queued or being retried), failed, "
                               "disabled (no token for the forge)", labels=["post", "outcome"])
    waiting = GaugeMetricFamily("perfci_forge_posts_pending", "Commit statuses and pull-request comments waiting to be "
                                "posted, whatever their age", labels=["post"])
    oldest = GaugeMetricFamily("perfci_forge_oldest_pending_status_age_seconds", "Time since the longest-pending commit status "
                               "last changed (0: none pending)")
    comment = case(
        (PullRequest.comment_sent_version == PullRequest.comment_version, literal(Delivery.SENT.value)),
        (Repository.forge.in_(tokenless), literal(Delivery.DISABLED.value)),
        (PullRequest.comment_error != "", literal(Delivery.FAILED.value)),
        else_=literal(Delivery.PENDING.value))
    statuses = (select(literal("status"), CommitStatus.delivery, func.count())  # ix_commit_statuses_delivery_updated_at
                .where(CommitStatus.delivery.in_([d.value for d in Delivery]), CommitStatus.updated_at >= since)
                .group_by(CommitStatus.delivery))
    comments = (select(literal("comment"), comment, func.count())  # ix_pull_requests_updated_at
                .join(Repository, Repository.id == PullRequest.repository_id)
                .where(PullRequest.comment_version > 0, PullRequest.updated_at >= since).group_by(comment))
    counts = {(post, d.value): 0 for post in POSTS for d in Delivery}
    for post, delivery, count in session.execute(statuses.union_all(comments)):
        counts[post, delivery] = count
    for key, count in counts.items():
        recent.add_metric(list(key), count)
    waiting.add_metric(["status"], single.statuses_pending)
    waiting.add_metric(["comment"], single.comments_pending)
    oldest.add_metric([], _age(now, single.oldest_status))
    yield from (recent, waiting, oldest)


def _detection(single: Row[Any], now: datetime) -> Iterator[Metric]:
    waiting = GaugeMetricFamily("perfci_runs_awaiting_detection", "Stored successful runs detection has not analysed yet")
    lag = GaugeMetricFamily("perfci_detection_lag_seconds", "Age of the oldest stored run detection has not analysed yet "
                            "(0: none waiting)")
    waiting.add_metric([], single.runs_waiting)
    lag.add_metric([], _age(now, single.oldest_run))
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
