"""An idle agent's claim waits on the server (``?wait=``): a job queued meanwhile — by a push, or
given back by another agent — answers it, woken by PostgreSQL's notification (the look-again interval
is set past the waits here, so only a notification can wake a claim); a claim that finds nothing
answers 204 when its wait ends; the listener comes back when its connection is cut."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from sqlalchemy import text

from perfci_server import db
from perfci_server.jobs import wakeups
from tests.server.server_support import complete_pushes, create_config, create_repository, enroll, push_github

pytestmark = pytest.mark.services

CLAIM = "/api/v1/agent/jobs/claim"


@pytest.fixture(autouse=True)
def _notifications_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wakeups, "FALLBACK_LOOK_S", 3600.0)
    monkeypatch.setattr(wakeups, "RECONNECT_S", (0.05,))


def _until(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def _listeners() -> list[int]:
    """The server's LISTEN connections to this database (their backend pids)."""
    with db.session_scope() as session:
        return list(session.scalars(text(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query = :listen"),
            {"listen": f"LISTEN {wakeups.CHANNEL}"}))


def _waiting_claim(pool: ThreadPoolExecutor, client, agent, wait: float = 60) -> Future:
    """A claim waiting on the server, once its machine's notifications are listened for."""
    claim = pool.submit(client.post, CLAIM, params={"wait": wait}, headers=agent["headers"])
    _until("the waiting claim listens for queued jobs", lambda: bool(_listeners()) or claim.done())
    assert not claim.done(), claim.result().text
    return claim


def _queue_push(client, sent_tasks) -> None:
    push_github(client)
    with db.session_scope() as session:  # the push's task, in its own transaction: its commit notifies
        complete_pushes(session, sent_tasks)


def _woken(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "perfci_server.jobs.router" and "woken as it was queued" in r.getMessage()]


def test_a_waiting_claim_is_answered_by_the_push_that_queues_its_job(committed_client, sent_tasks, caplog):
    client = committed_client
    create_repository(client)
    create_config(client)
    agent = enroll(client)
    with ThreadPoolExecutor(1) as pool, caplog.at_level(logging.INFO, logger="perfci_server.jobs.router"):
        claim = _waiting_claim(pool, client, agent)
        _queue_push(client, sent_tasks)
        answer = claim.result(timeout=120)
    assert answer.status_code == 200, answer.text
    assert answer.json()["job_id"] > 0
    assert len(_woken(caplog)) == 1


def test_a_job_given_back_wakes_the_claim_of_another_agent_of_its_machine(committed_client, sent_tasks, caplog):
    client = committed_client
    create_repository(client)
    create_config(client)
    first, second = enroll(client, "agent-1"), enroll(client, "agent-2")
    _queue_push(client, sent_tasks)
    taken = [client.post(CLAIM, headers=first["headers"]).json() for _ in range(3)]  # every job of the push
    with ThreadPoolExecutor(1) as pool, caplog.at_level(logging.INFO, logger="perfci_server.jobs.router"):
        claim = _waiting_claim(pool, client, second)
        job = taken[1]
        given_back = client.post(f"/api/v1/agent/jobs/{job['job_id']}/attempts/{job['attempt']}/release",
                                 json={"reason": "agent stopping"}, headers=first["headers"])
        assert given_back.status_code == 200, given_back.text
        answer = claim.result(timeout=120)
    assert answer.status_code == 200 and answer.json()["job_id"] == job["job_id"]
    assert len(_woken(caplog)) == 1


def test_a_claim_that_finds_nothing_answers_no_content_when_its_wait_ends(committed_client):
    client = committed_client
    create_config(client)
    agent = enroll(client)
    assert client.post(CLAIM, params={"wait": 0.2}, headers=agent["headers"]).status_code == 204
    assert client.post(CLAIM, params={"wait": 61}, headers=agent["headers"]).status_code == 422
    assert client.post(CLAIM, params={"wait": 0.2}, headers={"Authorization": "Bearer pca_revoked"}).status_code == 401


def test_the_listener_comes_back_when_its_connection_is_cut(committed_client, sent_tasks, caplog):
    client = committed_client
    create_repository(client)
    create_config(client)
    agent = enroll(client)
    with ThreadPoolExecutor(1) as pool, caplog.at_level(logging.INFO, logger="perfci_server.jobs"):
        assert pool.submit(client.post, CLAIM, params={"wait": 0.2}, headers=agent["headers"]).result(timeout=120).status_code == 204
        _until("the listener connects", lambda: bool(_listeners()))  # it stays a while after the claim
        [cut] = _listeners()
        with db.session_scope() as session:
            assert session.scalar(text("SELECT pg_terminate_backend(:pid)"), {"pid": cut})
        _until("a new listener", lambda: _listeners() not in ([], [cut]))
        claim = _waiting_claim(pool, client, agent)
        _queue_push(client, sent_tasks)
        answer = claim.result(timeout=120)
    assert answer.status_code == 200, answer.text
    assert any("not listening for queued jobs" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert len(_woken(caplog)) == 1


def test_without_notifications_a_waiting_claim_looks_again_at_short_intervals(monkeypatch):
    monkeypatch.setattr(wakeups, "FALLBACK_LOOK_S", 0.01)

    async def one_wait() -> bool:
        waits = wakeups.Wakeups("sqlite:///perfci.db")  # SQLite: nothing to listen to
        with waits.waiting(1) as queued:
            await asyncio.wait_for(waits.wait(queued, 3600), timeout=60)
            return waits.listening

    assert asyncio.run(one_wait()) is False


def test_the_listener_stops_once_no_claim_waits(committed_client, monkeypatch, caplog):
    monkeypatch.setattr(wakeups, "LINGER_S", 2.0)
    monkeypatch.setattr(wakeups, "IDLE_CHECK_S", 0.05)
    client = committed_client
    create_config(client)
    agent = enroll(client)

    def said(words: str) -> int:
        return sum(words in r.getMessage() for r in caplog.records if r.name == "perfci_server.jobs.wakeups")

    with ThreadPoolExecutor(1) as pool, caplog.at_level(logging.INFO, logger="perfci_server.jobs.wakeups"):
        for turn in (1, 2):  # the next waiting claim after a stop listens again
            assert pool.submit(client.post, CLAIM, params={"wait": 0.2}, headers=agent["headers"]).result(timeout=120).status_code == 204
            _until("the listener stops", lambda: said("stopped listening") == turn)
            _until("its connection closes", lambda: _listeners() == [])
    assert said("listening for queued jobs (") == 2
