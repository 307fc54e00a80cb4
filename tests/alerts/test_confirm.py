"""Adaptive re-measurement on the server (real PostgreSQL): a suspected change gets an interleaved
session of its bracket (a commit before its located range against one after it) whose jobs say why
they exist and are claimed before push jobs; it shows as pending (never as an alert) in the API and
the CI check, detection decides again on the session's own pairs when they arrive, and the
per-series budget stops it. Values are simulated (seeded); nothing depends on a timing."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import select, text

from tests.alerts.alerts_support import TSC, Lab
from perfci_server.jobs import repository as job_sql
from perfci_server.models import Commit, CommitStatus, Job, JobPurpose, Suspect
from perfci_server.settings import get_settings

STEP_AT = 30


class TipStep:
    """30 commits of tsc CPP at 100, then 3 at +3 % (0.3 % noise, 5 repetitions a commit's own job): a
    step the commit-level rank test cannot confirm yet (3 commits after it), so a suspect. A commit
    measured again is a side of a confirmation session: PERFCI_CONFIRM_PAIRS (24) repetitions."""

    def __init__(self, client, session, sent_tasks):
        self.rng = np.random.default_rng(7)
        self.lab = Lab(client, session, sent_tasks, configs=(TSC,))
        self.agent = self.lab.agent("dut-01")
        self.session = session
        self.measured: set[int] = set()

    def repetitions(self, i: int) -> int:
        reps = get_settings().confirm_pairs if i in self.measured else 5
        self.measured.add(i)
        return reps

    def level(self, i: int, _first: bool) -> float:
        return 103.0 if i >= STEP_AT else 100.0

    def values(self, i: int, _config: str) -> dict[str, list[float]]:
        first = i not in self.measured
        cpp = self.level(i, first) * (1 + 0.003 * self.rng.standard_normal(self.repetitions(i)))
        return {"cpp": cpp.tolist(), "pps": (2.1e9 * 0.97 / cpp).tolist()}

    def measure(self) -> list[int]:
        runs = self.lab.measure(self.values, self.agent)
        self.lab.detect()
        return runs

    def jobs(self, purpose: JobPurpose) -> list[Job]:
        self.session.expire_all()  # the claim and the upload write with Core statements
        return list(self.session.scalars(select(Job).where(Job.purpose == purpose.value).order_by(Job.id)))

    def suspects(self) -> list[Suspect]:
        self.session.expire_all()
        return list(self.session.scalars(select(Suspect).order_by(Suspect.id)))

    def status(self, sha: str) -> CommitStatus:
        """The forge verdict of a commit on dut-01 (what a commit status would post)."""
        self.session.expire_all()
        return self.session.scalars(select(CommitStatus).join(Commit, Commit.id == CommitStatus.commit_id)
                                    .where(Commit.sha == sha)).one()

    def check(self, sha: str) -> dict:
        response = self.lab.client.get("/api/v1/alerts/check", params={"commit": sha})
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture
def tip(client, session, sent_tasks, monkeypatch) -> TipStep:
    monkeypatch.setenv("PERFCI_CONFIRM_MAX_ROUNDS", "2")  # two rounds per commit keep the story short
    monkeypatch.setenv("PERFCI_CONFIRM_BUDGET_FRACTION", "0.4")  # a round is 5 commits x 5: two fit in 40 % of 33 x 5
    get_settings.cache_clear()
    series = TipStep(client, session, sent_tasks)
    series.lab.push(STEP_AT + 3)
    series.measure()
    return series


def test_a_suspect_is_pending_with_confirm_jobs_that_say_why(tip):
    shas = tip.lab.shas["main"]
    [row] = [s for s in tip.suspects() if s.metric == "cpp"]
    assert (row.state, row.why, row.direction) == ("pending", "unconfirmed", "regression")
    confirm = tip.jobs(JobPurpose.CONFIRM)
    [a, b] = sorted(confirm, key=lambda j: j.commit_id)  # one session: the bracket's two commits, partners
    assert (a.partner_job_id, b.partner_job_id) == (b.id, a.id) and a.repetitions == b.repetitions == 24
    assert {a.commit_id, b.commit_id} <= set(row.commit_ids) and a.commit_id < row.suspect_commit_id < b.commit_id
    assert all(j.round == 1 and j.state == "queued" and j.priority > 0 for j in confirm)
    assert all(f"at {shas[STEP_AT][:12]}" in j.reason and "unconfirmed regression" in j.reason for j in confirm)
    assert tip.lab.alerts() == []  # not an alert

    pending = tip.lab.client.get("/api/v1/alerts/pending").json()["items"]
    assert {(p["metric"], p["state"], p["suspect"]["sha"]) for p in pending} >= {("cpp", "pending", shas[STEP_AT])}
    assert all(p["confirm_jobs"] >= 1 for p in pending)
    verdict = tip.check(shas[STEP_AT])
    assert (verdict["state"], verdict["exit_code"]) == ("pending", 2)
    assert "suspected change being confirmed" in verdict["detail"] and verdict["pending_suspects"]
    assert tip.check(shas[5])["state"] == "clean"  # commits far from it are not held up


def test_confirm_jobs_are_claimed_before_older_push_jobs(tip):
    tip.lab.push(2)  # push jobs queued after the confirmation session (newer ids) ...
    push_ids = [j.id for j in tip.jobs(JobPurpose.PUSH) if j.state == "queued"]
    confirm_ids = [j.id for j in tip.jobs(JobPurpose.CONFIRM)]
    # ... and one older than every confirm job (the lowest id: first in a claim by age alone)
    tip.session.execute(text("UPDATE jobs SET id = -id WHERE id = :id"), {"id": push_ids[0]})
    assert len(push_ids) == 2 and -push_ids[0] < min(confirm_ids)
    claimed: list[int] = []
    while len(claimed) < len(confirm_ids):  # an interleaved pair comes in one claim
        job = tip.lab.client.post("/api/v1/agent/jobs/claim", headers=tip.agent["headers"]).json()
        claimed += [job["job_id"]] + ([job["partner"]["job_id"]] if job["partner"] else [])
    assert sorted(claimed) == sorted(confirm_ids)


def test_detection_decides_again_on_the_brackets_session_and_confirms_the_step_before_more_commits_come(tip):
    shas = tip.lab.shas["main"]
    [row] = [s for s in tip.suspects() if s.metric == "cpp"]
    status = tip.status(shas[STEP_AT])  # the forge hears "pending" while the session decides ...
    assert status.state == "pending" and status.description.startswith("confirming a suspected regression: cpp +")
    assert tip.status(shas[STEP_AT - 5]).state == "success"  # ... only for the commits the suspect names
    runs = tip.measure()  # the session arrives, both sides in one claim; detection runs again
    assert len(runs) == 2 and [len(s) for s in tip.lab.sessions[-1:]] == [2]
    [group] = tip.lab.alerts()  # 24 pairs 3 % apart at 0.3 % noise: DIFFERENT at the first look's share of 1e-3
    # a range around the step (the session confirms the change, it does not pin it to one commit)
    assert group["last_good"]["position"] < STEP_AT <= group["first_bad"]["position"] and group["direction"] == "regression"
    tip.session.refresh(row)
    assert row.state == "confirmed"
    assert all(j.state == "done" for j in tip.jobs(JobPurpose.CONFIRM)) and len(tip.jobs(JobPurpose.CONFIRM)) == 2
    baseline, extra = job_sql.repetitions_by_purpose(tip.session, row.machine_id, row.config_id, row.commit_ids + [row.suspect_commit_id])
    assert extra == 2 * 24
    assert len(tip.lab.shas["main"]) == STEP_AT + 3  # no new commit was needed
    assert tip.check(shas[STEP_AT])["state"] == "regressed"
    assert tip.status(shas[STEP_AT]).state == "failure"


class BusyFirstJobs(TipStep):
    """The level never moves: the first job of commits 30-32 ran on a host 3 % slower (a busy host), so
    their own jobs show the step the tip case has; a confirmation session measures the true level."""

    def level(self, i: int, first: bool) -> float:
        return 103.0 if first and i >= STEP_AT else 100.0


def test_a_session_that_shows_the_bracket_the_same_rejects_the_suspect(client, session, sent_tasks, monkeypatch):
    monkeypatch.setenv("PERFCI_CONFIRM_BUDGET_FRACTION", "0.4")
    get_settings.cache_clear()
    series = BusyFirstJobs(client, session, sent_tasks)
    shas = series.lab.push(STEP_AT + 3)
    series.measure()
    [row] = [s for s in series.suspects() if s.metric == "cpp"]
    assert row.state == "pending" and len(series.jobs(JobPurpose.CONFIRM)) == 2
    series.measure()  # one session: the two commits measure the same level
    series.session.refresh(row)
    assert row.state == "rejected" and series.lab.alerts() == []
    assert len(series.jobs(JobPurpose.CONFIRM)) == 2  # SAME ends the confirmation: no second session
    assert series.status(shas[STEP_AT]).state == "success"


def test_the_budget_is_respected(client, session, sent_tasks, monkeypatch):
    monkeypatch.setenv("PERFCI_CONFIRM_BUDGET_FRACTION", "0.05")  # 5 % of 33 x 5 repetitions: 8, a session of 24 pairs is 48
    get_settings.cache_clear()
    series = TipStep(client, session, sent_tasks)
    series.lab.push(STEP_AT + 3)
    series.measure()
    assert series.jobs(JobPurpose.CONFIRM) == []
    assert {s.state for s in series.suspects()} == {"exhausted"}
    assert series.check(series.lab.shas["main"][STEP_AT])["pending_suspects"] == []


def test_bisect_steps_run_ahead_of_push_jobs_even_when_the_commit_already_waits_as_one(client, session, sent_tasks):
    lab = Lab(client, session, sent_tasks, configs=(TSC,))
    agent = lab.agent("dut-01")
    shas = lab.push(4)
    jobs = list(session.scalars(select(Job).order_by(Job.id)))
    by_sha = {j.commit_id: j for j in jobs}
    commit_ids = list(by_sha)
    # a bisect step wants the newest commit (already queued as a push job) and nothing else
    job_sql.insert_missing_jobs(session, [commit_ids[-1]], [jobs[0].machine_id], [jobs[0].config_id], 3,
                                JobPurpose.BISECT, "bisect 1: step")
    session.commit()
    claim = client.post("/api/v1/agent/jobs/claim", headers=agent["headers"]).json()
    assert claim["commit"] == shas[-1]  # not the oldest push job
    promoted = session.get(Job, claim["job_id"])
    session.refresh(promoted)
    assert promoted.priority > 0 and promoted.reason == "bisect 1: step" and promoted.round == 0


def test_the_claim_is_one_index_scan_in_priority_order(session):
    """EXPLAIN of the claim's pick on PostgreSQL: ix_jobs_claim, no sort. With sequential scans and
    sorts priced out, as on a large table: a small table's plan may sort whatever the index, but with
    no index in the pick's order a Sort node stays in the plan."""
    session.execute(text("SET LOCAL enable_seqscan = off"))
    session.execute(text("SET LOCAL enable_sort = off"))
    pick = job_sql._PICK_NEXT_JOB.replace("IN :backends", "IN ('auto', 'tsc')")
    plan = "\n".join(row[0] for row in session.execute(text(f"EXPLAIN {pick}"), {"machine_id": 1}))
    assert "ix_jobs_claim" in plan and "Sort" not in plan, plan


class DriftingHost(TipStep):
    """The tip step on a host that drifts between claims: every claim (one job, or an interleaved
    pair measured together) runs 2 % slower or faster at random (seeded), far beyond the 0.3 % noise
    of the repetitions inside it."""

    def level(self, i: int, first: bool) -> float:
        host = 1.0 + 0.02 * float(np.random.default_rng([11, len(self.lab.sessions)]).standard_normal())
        return super().level(i, first) * host


def confirmed_within(series: TipStep, rounds: int) -> bool:
    for _ in range(rounds):
        if series.lab.alerts() or not [j for j in series.jobs(JobPurpose.CONFIRM) if j.state == "queued"]:
            break
        series.measure()
    return bool(series.lab.alerts())


def test_on_a_drifting_host_the_brackets_sessions_confirm_the_step(client, session, sent_tasks, monkeypatch):
    """Every claim runs on a host 2 % slower or faster: the commits' own jobs differ by that drift, the two sides of
    one session share it, so the session's pairs show the step. Five commits after it: the commits' own medians
    on each side of the bracket lean the session's way (the independent half of the confirmation)."""
    monkeypatch.setenv("PERFCI_CONFIRM_BUDGET_FRACTION", "0.9")
    get_settings.cache_clear()
    series = DriftingHost(client, session, sent_tasks)
    series.lab.push(STEP_AT + 5)
    series.measure()
    [row] = [s for s in series.suspects() if s.metric == "cpp"]
    by_id = {j.id: j for j in series.jobs(JobPurpose.CONFIRM)}
    pairs = {frozenset((j.id, j.partner_job_id)) for j in by_id.values() if j.partner_job_id is not None}
    assert len(pairs) == 1 and len(by_id) == 2  # the bracket's two commits, partners of each other
    [(a, b)] = [tuple(p) for p in pairs]
    assert by_id[a].partner_job_id == b and by_id[b].partner_job_id == a
    assert min(by_id[a].commit_id, by_id[b].commit_id) < row.suspect_commit_id < max(by_id[a].commit_id, by_id[b].commit_id)

    assert confirmed_within(series, 4)
    assert all(len(s) == 2 for s in series.lab.sessions[STEP_AT + 5:])  # each session's pair claimed together
    [group] = series.lab.alerts()
    assert group["last_good"]["position"] < STEP_AT <= group["first_bad"]["position"] and group["direction"] == "regression"
    paired_runs = series.session.execute(text(
        "SELECT r.job_id, r.paired_with FROM runs r WHERE r.paired_with IS NOT NULL AND r.status = 'ok'")).all()
    assert paired_runs and all((p, j) in set(paired_runs) for j, p in paired_runs)  # each side names the other
