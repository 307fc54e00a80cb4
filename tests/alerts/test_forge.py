"""Forge feedback against a real HTTP server on loopback that records the requests: one commit
status per measured commit, retries with backoff, refusals, outages outlived by the resend sweep,
triage flipping a status back. Data is committed (the post task opens its own sessions)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from perfci_server import dispatch
from perfci_server.alerts import verdicts
from perfci_server.forge import client as forge_client
from perfci_server.forge import statuses as forge_statuses
from perfci_server.forge.registry import kind_of
from perfci_server.forge import tasks as forge_tasks
from perfci_server.models import AlertGroup, CommitState, CommitStatus
from tests.alerts.conftest import FORGE_TOKEN as TOKEN
from tests.alerts.conftest import STEP
from tests.server.server_support import ADMIN

pytestmark = pytest.mark.services


def _post_all(sent_tasks, start: int = 0) -> int:
    """Run the queued posts from ``start`` on, each status once (a later task of a status already
    sent finds nothing to post); returns how many posts were queued in all."""
    posts = sent_tasks.named(forge_statuses.POST_TASK)
    for status_id in dict.fromkeys(status_id for (status_id,) in posts[start:]):
        forge_tasks.post_status.apply(args=(status_id,))
    return len(posts)


def _statuses(session) -> dict[int, CommitStatus]:
    session.expire_all()
    return {s.commit_id: s for s in session.scalars(select(CommitStatus))}


def test_one_status_per_measured_commit_failure_names_the_regression(lab, forge, sent_tasks):
    assert _post_all(sent_tasks) == 20  # each commit: pending once its job was queued, then its verdict
    assert len(forge.requests) == 10  # posted after both: only the newest
    shas = lab.shas["main"]
    by_sha = {r.path.rsplit("/", 1)[1]: r for r in forge.requests}
    assert set(by_sha) == set(shas)
    for sha, request in by_sha.items():
        assert request.path == f"/repos/perfci-org/dataplane/statuses/{sha}"
        assert request.headers["authorization"] == f"Bearer {TOKEN}"
        assert request.headers["accept"] == "application/vnd.github+json"
        assert request.body["context"] == "perfci/dut-01"
    bad = by_sha[shas[STEP]].body
    [group_id] = [g["id"] for g in lab.alerts()]
    assert bad["state"] == "failure"
    assert bad["description"] == f"regression: ipp +2.90% (sim-64B, sim), alert {group_id}"
    rows = _statuses(lab.session)
    pages = {r.commit_id: r.public_id for r in rows.values()}
    assert bad["target_url"].startswith("https://perfci.example.com/v/")  # the verdict's page, not a token-protected route
    assert bad["target_url"].removeprefix("https://perfci.example.com/v/") in pages.values()
    # The first commit has nothing before it to be compared with: no green by absence.
    first = by_sha[shas[0]].body
    assert (first["state"], first["description"]) == ("error", "no baseline yet: no earlier commit of its branch measured on dut-01")
    assert {by_sha[s].body["state"] for s in shas[1:] if s != shas[STEP]} == {"success"}
    assert all(r.body["target_url"].startswith("https://perfci.example.com/v/") for r in forge.requests)
    assert all(len(r.body["description"]) <= 140 for r in forge.requests)
    rows = _statuses(lab.session)
    assert {(r.delivery, r.sent_version, r.attempts) for r in rows.values()} == {("sent", 2, 1)}  # version 1 was the pending


def test_transient_failures_are_retried_with_backoff_until_posted(lab, forge, sent_tasks, monkeypatch):
    delays = []
    real = dispatch.retry_delay
    monkeypatch.setattr(dispatch, "retry_delay", lambda settings, n: delays.append(real(settings, n)) or 0)
    forge.script.extend([503, 429])
    [first, *_] = sent_tasks.named(forge_statuses.POST_TASK)
    forge_tasks.post_status.apply(args=first)
    assert [r.answered for r in forge.requests] == [503, 429, 201]
    assert delays == [5.0, 10.0]  # backoff x 2^n (the default 5 s base)
    [row] = [r for r in _statuses(lab.session).values() if r.id == first[0]]
    assert (row.delivery, row.attempts, row.last_error) == ("sent", 3, "")


def test_a_refused_status_is_not_retried_and_the_alert_stays(lab, forge, sent_tasks):
    forge.script.append(401)
    [first, *_] = sent_tasks.named(forge_statuses.POST_TASK)
    forge_tasks.post_status.apply(args=first)
    assert [r.answered for r in forge.requests] == [401]
    [row] = [r for r in _statuses(lab.session).values() if r.id == first[0]]
    assert row.delivery == "failed" and "HTTP 401" in row.last_error
    assert len(lab.alerts()) == 1


def test_a_redirected_status_is_a_failed_post_and_the_token_stays_home(lab, forge, sent_tasks):
    forge.script.append(302)
    [first, *_] = sent_tasks.named(forge_statuses.POST_TASK)
    assert forge_tasks.post_status.apply(args=first).get() == "refused"
    assert [r.answered for r in forge.requests] == [302]  # the redirect was not followed
    [row] = [r for r in _statuses(lab.session).values() if r.id == first[0]]
    assert row.delivery == "failed" and "HTTP 302 redirect to http://elsewhere.invalid" in row.last_error


def test_an_outage_longer_than_the_retries_is_outlived_by_the_resend_sweep(lab, forge, sent_tasks):
    forge.script.extend([503] * 40)
    _post_all(sent_tasks)
    assert len(forge.requests) == 10 * 4 and forge.accepted() == []  # 1 try + 3 retries each
    rows = _statuses(lab.session)
    assert {r.delivery for r in rows.values()} == {"pending"} and all("HTTP 503" in r.last_error for r in rows.values())
    assert len(lab.alerts()) == 1  # the alert never depended on the post
    # The forge is back; the periodic sweep re-sends what is still pending.
    sent_before = len(sent_tasks.named(forge_statuses.POST_TASK))
    assert forge_tasks.resend_pending.apply().get() == 10
    _post_all(sent_tasks, sent_before)
    assert len(forge.accepted()) == 10
    assert {r.delivery for r in _statuses(lab.session).values()} == {"sent"}


def test_triage_flips_the_commit_status_and_the_check(lab, forge, sent_tasks):
    _post_all(sent_tasks)
    client = lab.client
    [group] = lab.alerts()
    bad_sha = lab.shas["main"][STEP]
    assert client.get("/api/v1/alerts/check", params={"commit": bad_sha, "repository": "perfci-org/dataplane"}).json()["exit_code"] == 1
    sent_before = len(sent_tasks.named(forge_statuses.POST_TASK))
    response = client.post(f"/api/v1/alerts/{group['id']}/triage", json={"status": "invalid", "note": "measurement host was swapping", "by": "ada"}, headers=ADMIN)
    assert response.status_code == 200, response.text
    assert (response.json()["status"], response.json()["triaged_by"]) == ("invalid", "ada")
    assert _post_all(sent_tasks, sent_before) == sent_before + 1  # only the implicated commit changed
    assert (forge.requests[-1].path.endswith(bad_sha), forge.requests[-1].body["state"]) == (True, "success")
    assert client.get("/api/v1/alerts/check", params={"commit": bad_sha}).json()["exit_code"] == 0
    row = next(r for r in _statuses(lab.session).values() if r.state == "success" and r.version == 2)
    assert (row.delivery, row.sent_version) == ("sent", 2)
    # Re-opening it makes the commit fail again.
    client.post(f"/api/v1/alerts/{group['id']}/triage", json={"status": "untriaged", "by": "ada"}, headers=ADMIN)
    _post_all(sent_tasks, sent_before + 1)
    assert forge.requests[-1].body["state"] == "failure"
    lab.session.expire_all()
    assert lab.session.scalar(select(AlertGroup.status)) == "untriaged"


def test_triage_needs_an_admin_token_and_a_valid_state(lab):
    [group] = lab.alerts()
    url = f"/api/v1/alerts/{group['id']}/triage"
    assert lab.client.post(url, json={"status": "fixed", "by": "ada"}).status_code == 401
    agent_headers = lab.agent_row["headers"]
    assert lab.client.post(url, json={"status": "fixed", "by": "ada"}, headers=agent_headers).status_code == 403
    assert lab.client.post(url, json={"status": "closed", "by": "ada"}, headers=ADMIN).status_code == 422
    assert lab.client.post("/api/v1/alerts/999999/triage", json={"status": "fixed", "by": "ada"}, headers=ADMIN).status_code == 404


def _status(forge: str, api_url: str, state: CommitState, description: str = "no baseline yet"):
    return kind_of(forge).status_call(api_url, "t", "o/r", "c" * 40, state.value, "perfci/dut-01", description, None)


def test_gitlab_commit_status_request_shape(forge):
    call = kind_of("gitlab").status_call(forge.url + "/api/v4", "glpat-secret", "perfci-org/dataplane", "a" * 40, "failure",
                                         "perfci/dut-01", "regression: ipp +2.90% (sim-64B, sim), alert 1", None)
    assert forge_client.call("gitlab", call, timeout=5).status_code == 201
    [request] = forge.requests
    assert request.path == "/api/v4/projects/perfci-org%2Fdataplane/statuses/" + "a" * 40
    assert request.headers["private-token"] == "glpat-secret"
    assert request.body == {"state": "failed", "name": "perfci/dut-01", "description": "regression: ipp +2.90% (sim-64B, sim), alert 1"}


@pytest.mark.parametrize(("forge_kind", "neutral"), [("github", "error"), ("gitlab", "skipped"), ("gitea", "warning")])
def test_no_verdict_is_never_posted_as_success(forge_kind, neutral):
    call = _status(forge_kind, "http://forge.invalid", CommitState.NEUTRAL)
    assert call.body["state"] == neutral
    if forge_kind == "gitea":  # GitHub's paths under Gitea's own API root and token scheme
        assert (call.url, call.headers["Authorization"]) == ("http://forge.invalid/repos/o/r/statuses/" + "c" * 40, "token t")


@pytest.mark.parametrize("forge_kind", ["github", "gitlab", "gitea"])
def test_a_suspect_being_confirmed_is_posted_as_pending_on_every_forge(forge_kind):
    call = _status(forge_kind, "http://forge.invalid", CommitState.PENDING, "confirming a suspected regression: cpp +2.10%")
    assert call.body["state"] == "pending"  # every API names the state so


def test_unreachable_forge_is_transient(forge):
    with pytest.raises(forge_client.ForgeUnavailable):
        forge_client.call("github", _status("github", "http://127.0.0.1:9", CommitState.SUCCESS), timeout=2)


def test_a_batch_of_verdicts_takes_as_many_statements_as_one_commit(lab, sent_tasks):
    """record_verdicts is set-based: its statements do not grow with the commits of the batch."""
    from sqlalchemy import event

    from perfci_server.settings import get_settings

    rows = _statuses(lab.session)
    [machine_id] = {r.machine_id for r in rows.values()}
    bad = next(r.commit_id for r in rows.values() if r.state == CommitState.FAILURE.value)
    engine = lab.session.get_bind()

    def statements(commit_ids: list[int]) -> int:
        lab.session.expire_all()
        seen = []
        def listener(*args):
            seen.append(args[2])  # the statement text
        event.listen(engine, "before_cursor_execute", listener)
        try:
            verdicts.record_verdicts(lab.session, machine_id, commit_ids, get_settings())
        finally:
            event.remove(engine, "before_cursor_execute", listener)
        return len(seen)

    posted = len(sent_tasks.named(forge_statuses.POST_TASK))
    one, batch = statements([bad]), statements(sorted(rows))
    assert batch == one, f"{batch} statements for {len(rows)} commits, {one} for one"
    assert len(sent_tasks.named(forge_statuses.POST_TASK)) == posted  # same verdicts: nothing posted again
    lab.session.execute(CommitStatus.__table__.delete())  # and when every row is new
    every_new = statements(sorted(rows))
    assert {r.commit_id for r in _statuses(lab.session).values()} == set(rows)
    lab.session.execute(CommitStatus.__table__.delete())
    assert every_new == statements([bad])


def test_a_slow_post_of_an_older_verdict_never_lands_after_a_newer_one(lab, forge, sent_tasks, monkeypatch):
    """Two workers post one status: the first, of an older verdict, is held on its way to the
    forge while a newer verdict is written and its post starts. That post waits for the first
    (or, were posts of one status not serialised, reaches the forge first); the forge ends on the
    newer verdict either way, and the database says it was sent."""
    import threading
    import time

    from sqlalchemy import text

    from perfci_server.db import session_scope
    from perfci_server.settings import get_settings

    _post_all(sent_tasks)
    bad_sha = lab.shas["main"][STEP]
    row = next(r for r in _statuses(lab.session).values() if r.state == "failure")
    subject, machine_id, commit_id = forge_statuses.SERIES, row.machine_id, row.commit_id

    def decide(state: CommitState, description: str) -> None:
        with session_scope() as session:
            forge_statuses.write_verdicts(session, machine_id, subject, {commit_id: (state, description)}, get_settings())

    held, release = threading.Event(), threading.Event()
    real_call = forge_client.call

    def slow_first(*args, **kwargs):
        if not held.is_set():
            held.set()
            assert release.wait(60), "the held post was never released"
        return real_call(*args, **kwargs)

    monkeypatch.setattr(forge_client, "call", slow_first)
    decide(CommitState.PENDING, "older: being confirmed")
    older = threading.Thread(target=forge_tasks.post_status.apply, args=((row.id,),))
    older.start()
    assert held.wait(60)
    decide(CommitState.FAILURE, "newer: regression")
    newer = threading.Thread(target=forge_tasks.post_status.apply, args=((row.id,),))
    newer.start()
    posted_before = len(forge.requests)
    deadline = time.monotonic() + 60
    waiting = 0
    # The newer post either waits for the older one or reaches the forge. Each look takes a connection
    # only while it reads: held across the loop, it could leave the newer post none to start with.
    while not waiting and len(forge.requests) == posted_before and time.monotonic() < deadline:
        with session_scope() as session:
            waiting = session.scalar(text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                          "AND wait_event_type = 'Lock' AND wait_event = 'advisory'"))
        time.sleep(0.05)
    assert waiting or len(forge.requests) > posted_before, "the newer post neither waited for the older one nor posted"
    release.set()
    older.join(60)
    newer.join(60)
    last = [r for r in forge.accepted() if r.path.endswith(f"/statuses/{bad_sha}") and r.body["context"] == row.context][-1]
    assert (last.body["state"], last.body["description"]) == ("failure", "newer: regression")
    final = next(r for r in _statuses(lab.session).values() if r.id == row.id)
    assert (final.delivery, final.sent_version) == ("sent", final.version)
