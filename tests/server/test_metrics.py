"""/metrics: Prometheus's text format, read by prometheus_client's own parser, against a PostgreSQL
database seeded with known jobs, agents, deliveries, statuses, comments, runs and pushes (the clock
of the scrape fixed, so every age is exact). Who may read it, and a database that does not answer."""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.server.broker_outage import closed_port
from perfci_server import db, metrics, migrate
from perfci_server.app import create_app
from perfci_server.settings import get_settings
from perfci_server.models import (Agent, BenchConfig, Branch, Commit, CommitStatus, Job, Machine, PullRequest, Push, Repository,
                                  Run, WebhookDelivery)

pytestmark = pytest.mark.services

NOW = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)
METRICS_TOKEN = "scrape-only-token-0123456789abcdef"
ADMIN_TOKEN = "observe-admin-token-0123456789abcdef"


def settings_env(monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    for key, val in env.items():
        monkeypatch.setenv(key, val)
    get_settings.cache_clear()
    db.reset_engine()


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def _fingerprint(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def seed() -> None:
    """The database an operator's scrape reads below: every number asserted comes from here."""
    with db.session_scope() as s:
        dut1, dut2 = Machine(fingerprint=_fingerprint("dut-01"), name="dut-01"), Machine(fingerprint=_fingerprint("dut-02"), name="dut-02")
        github = Repository(name="o/gh", forge="github", clone_url="https://example.com/gh.git", webhook_secret="x")
        gitlab = Repository(name="o/gl", forge="gitlab", clone_url="https://example.com/gl.git", webhook_secret="x")
        config = BenchConfig(name="c1")
        s.add_all([dut1, dut2, github, gitlab, config])
        s.flush()
        commits = [Commit(repository_id=github.id, sha=hashlib.sha1(str(i).encode()).hexdigest()) for i in range(20)]
        s.add_all(commits)
        s.flush()
        jobs = iter(commits)

        def job(machine: Machine, state: str, purpose: str, age: float) -> Job:
            row = Job(commit_id=next(jobs).id, machine_id=machine.id, config_id=config.id, state=state, purpose=purpose,
                      created_at=ago(age))
            s.add(row)
            return row

        for age in (300, 200, 100):
            job(dut1, "queued", "push", age)
        for age in (1000, 50):
            job(dut1, "queued", "backfill", age)
        job(dut1, "leased", "push", 900)
        job(dut1, "running", "push", 800)
        done = [job(dut1, "done", "push", 5000) for _ in range(4)]
        job(dut1, "failed", "push", 5000)
        job(dut2, "queued", "pull", 30)
        s.flush()

        s.add_all([
            Agent(name="a1", machine_id=dut1.id, token_hash=_fingerprint("t1"), last_seen_at=ago(5)),
            Agent(name="a2", machine_id=dut2.id, token_hash=_fingerprint("t2"), last_seen_at=ago(3600), stopped_claiming="host changed"),
            Agent(name="a3", machine_id=dut2.id, token_hash=_fingerprint("t3"), last_seen_at=ago(10), revoked_at=ago(8)),
            Agent(name="a4", machine_id=dut2.id, token_hash=_fingerprint("t4")),  # enrolled, never called since
        ])

        deliveries = [("github", "scheduled: push to main", 500), ("github", "scheduled: pull request #3 opened", 400),
                      ("github", "scheduled: push to feature", 300), ("github", "ignored: tag (repository does not track tags)", 200),
                      ("github", "pong: ", 100), ("github", "scheduled: push to main", 5000),  # before the last hour
                      ("gitlab", "scheduled: push to main", 700), ("gitlab", "scheduled: push to dev", 600),
                      ("gitlab", "ignored: no commits", 9000)]
        for n, (forge, outcome, age) in enumerate(deliveries):
            repository = github if forge == "github" else gitlab
            s.add(WebhookDelivery(forge=forge, delivery_id=f"d-{n}", event="push", repository_id=repository.id, outcome=outcome,
                                  created_at=ago(age)))

        statuses = ([("sent", 9000)] * 4 + [("sent", 60)] * 2 + [("pending", 5000), ("pending", 400), ("pending", 100)]
                    + [("failed", 2000), ("failed", 7200), ("disabled", 3000)])
        for n, (delivery, age) in enumerate(statuses):
            s.add(CommitStatus(repository_id=github.id, commit_id=commits[n].id, machine_id=dut1.id, scope="series",
                               public_id=secrets.token_urlsafe(16), state="success", context="perfci/dut-01", delivery=delivery,
                               updated_at=ago(age)))

        def pull(repository: Repository, number: int, version: int, sent: int | None, age: float, error: str = "") -> None:
            s.add(PullRequest(repository_id=repository.id, number=number, base_branch="main", head_branch=f"f{number}",
                              head_sha=commits[number].sha, comment_body="c" if version else "", comment_version=version,
                              comment_sent_version=sent, comment_error=error, public_id=secrets.token_urlsafe(16),
                              updated_at=ago(age)))

        pull(github, 1, 2, 2, 100)  # sent
        pull(github, 2, 2, 1, 200)  # its edit waits
        pull(github, 3, 1, None, 300, "github https://api.github.com/...: HTTP 401 Bad credentials")  # failed
        pull(github, 4, 0, None, 10)  # nothing to say yet: not counted
        pull(gitlab, 5, 1, None, 400, "no gitlab token configured: the comment is kept, not posted")  # disabled
        pull(github, 6, 1, 1, 8000)  # sent before the last hour
        pull(github, 7, 1, None, 9000)  # waiting since before the last hour

        def run(job_row: Job, status: str, received: float, detected: bool) -> None:
            s.add(Run(job_id=job_row.id, attempt=1, status=status, received_at=ago(received), detected_at=NOW if detected else None))

        run(done[0], "ok", 600, False)
        run(done[1], "ok", 60, False)
        run(done[2], "ok", 7000, True)
        run(done[3], "build_failed", 9000, False)  # nothing to detect on

        main = Branch(repository_id=github.id, name="main")
        s.add(main)
        s.flush()
        s.add_all([Push(repository_id=github.id, branch_id=main.id, after=commits[0].sha, complete=False),
                   Push(repository_id=github.id, branch_id=main.id, after=commits[1].sha, complete=True)])


def scrape(client: TestClient, **headers: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples[name, frozenset(labels.items())]


def test_the_scrape_says_what_the_database_holds(committed, monkeypatch):
    settings_env(monkeypatch, PERFCI_GITHUB_TOKEN="ghp_" + "x" * 36)  # github posts; gitlab and gitea have no token
    monkeypatch.setattr(metrics, "utcnow", lambda: NOW)
    seed()
    with TestClient(create_app()) as client:
        samples = scrape(client)
    assert value(samples, "perfci_database_up") == 1

    queued = {dict(labels)["machine"] + "/" + dict(labels)["purpose"]: v for (name, labels), v in samples.items()
              if name == "perfci_jobs_queued" and v}
    assert queued == {"dut-01/push": 3, "dut-01/backfill": 2, "dut-02/pull": 1}
    assert value(samples, "perfci_jobs_queued", machine="dut-02", purpose="push") == 0  # a drained queue reads 0, not absent
    assert value(samples, "perfci_jobs_oldest_queued_age_seconds", machine="dut-01", purpose="push") == 300
    assert value(samples, "perfci_jobs_oldest_queued_age_seconds", machine="dut-01", purpose="backfill") == 1000
    assert value(samples, "perfci_jobs_oldest_queued_age_seconds", machine="dut-02", purpose="pull") == 30
    assert ("perfci_jobs_oldest_queued_age_seconds", frozenset({("machine", "dut-02"), ("purpose", "push")})) not in samples
    assert value(samples, "perfci_jobs_running", machine="dut-01") == 2
    assert value(samples, "perfci_jobs_running", machine="dut-02") == 0

    assert {s: value(samples, "perfci_agents", state=s) for s in ("active", "stopped", "revoked")} == {"active": 2, "stopped": 1, "revoked": 1}
    seen = {dict(labels)["agent"]: (dict(labels)["machine"], v) for (name, labels), v in samples.items()
            if name == "perfci_agent_last_seen_timestamp_seconds"}
    assert seen == {"a1": ("dut-01", ago(5).timestamp()), "a2": ("dut-02", ago(3600).timestamp())}  # a3 revoked, a4 never seen

    deliveries = {(dict(labels)["forge"], dict(labels)["outcome"]): v for (name, labels), v in samples.items()
                  if name == "perfci_webhook_deliveries_last_hour" and v}
    assert deliveries == {("github", "scheduled"): 3, ("github", "ignored"): 1, ("github", "pong"): 1, ("gitlab", "scheduled"): 2}
    assert value(samples, "perfci_webhook_deliveries_last_hour", forge="gitea", outcome="scheduled") == 0
    assert value(samples, "perfci_webhook_last_delivery_timestamp_seconds", forge="github") == ago(100).timestamp()
    assert value(samples, "perfci_webhook_last_delivery_timestamp_seconds", forge="gitlab") == ago(600).timestamp()
    assert ("perfci_webhook_last_delivery_timestamp_seconds", frozenset({("forge", "gitea")})) not in samples  # none yet

    posts = {(dict(labels)["post"], dict(labels)["outcome"]): v for (name, labels), v in samples.items()
             if name == "perfci_forge_posts_last_hour"}
    assert posts == {("status", "sent"): 2, ("status", "pending"): 2, ("status", "failed"): 1, ("status", "disabled"): 1,
                     ("comment", "sent"): 1, ("comment", "pending"): 1, ("comment", "failed"): 1, ("comment", "disabled"): 1}
    assert value(samples, "perfci_forge_posts_pending", post="status") == 3  # whatever their age
    assert value(samples, "perfci_forge_posts_pending", post="comment") == 3  # #2, #3 (its last post failed), #7; not #5 (no token)
    assert value(samples, "perfci_forge_oldest_pending_status_age_seconds") == 5000

    assert value(samples, "perfci_runs_awaiting_detection") == 2
    assert value(samples, "perfci_detection_lag_seconds") == 600
    assert value(samples, "perfci_pushes_incomplete") == 1


def test_an_empty_database_reads_zero_not_absent(committed):
    with TestClient(create_app()) as client:
        samples = scrape(client)
    assert value(samples, "perfci_detection_lag_seconds") == 0 and value(samples, "perfci_forge_oldest_pending_status_age_seconds") == 0
    assert value(samples, "perfci_forge_posts_last_hour", post="status", outcome="pending") == 0
    assert value(samples, "perfci_forge_posts_pending", post="comment") == 0
    assert value(samples, "perfci_webhook_deliveries_last_hour", forge="github", outcome="scheduled") == 0
    assert value(samples, "perfci_agents", state="active") == 0


def test_outside_development_metrics_take_the_metrics_token_or_an_admin_token(committed, monkeypatch):
    settings_env(monkeypatch, PERFCI_ENV="production", PERFCI_ADMIN_TOKEN=ADMIN_TOKEN, PERFCI_METRICS_TOKEN=METRICS_TOKEN)
    with TestClient(create_app()) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"Authorization": "Bearer not-the-token-at-all-0123456789"}).status_code == 401
        assert value(scrape(client, Authorization=f"Bearer {METRICS_TOKEN}"), "perfci_database_up") == 1
        assert value(scrape(client, Authorization=f"Bearer {ADMIN_TOKEN}"), "perfci_database_up") == 1
        # the metrics token opens /metrics and nothing else
        assert client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).status_code == 401


def test_a_metrics_token_shorter_than_24_characters_is_refused(monkeypatch):
    from perfci_server.settings import Settings

    with pytest.raises(ValueError, match="PERFCI_METRICS_TOKEN must be at least 24 characters"):
        Settings(metrics_token="short")
    assert Settings(metrics_token="").metrics_token is None  # empty (compose's default): no metrics token


def test_a_database_that_does_not_answer_is_a_scrape_that_says_so(monkeypatch):
    settings_env(monkeypatch, PERFCI_DATABASE_URL=f"postgresql+psycopg://perfci:perfci@127.0.0.1:{closed_port()}/perfci?connect_timeout=2")
    with TestClient(create_app()) as client:
        samples = scrape(client)
    assert samples == {("perfci_database_up", frozenset()): 0}



def test_the_embedded_sqlite_database_answers_the_same_scrape():
    db.get_engine()  # conftest: SQLite under a temporary data dir, created here
    migrate.upgrade()
    with TestClient(create_app()) as client:
        samples = scrape(client)
    assert value(samples, "perfci_database_up") == 1
    assert value(samples, "perfci_forge_posts_pending", post="comment") == 0
    assert value(samples, "perfci_webhook_deliveries_last_hour", forge="gitea", outcome="pong") == 0
