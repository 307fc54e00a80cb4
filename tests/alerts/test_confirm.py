"""Adaptive re-measurement on the server (real PostgreSQL): a suspected change gets confirmation
jobs that say why they exist and are claimed before push jobs, it shows as pending (never as an
alert) in the API and the CI check, detection decides again when the rounds arrive, and the
per-series budget stops it. Values are simulated (seeded); nothing depends on a timing."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import select, text

from tests.alerts.alerts_support import TSC, Lab
from perfci_core.analysis.adaptive import run_order
from perfci_server.jobs import repository as job_sql
from perfci_server.models import Commit, CommitStatus, Job, JobPurpose, Suspect
from perfci_server.settings import get_settings

STEP_AT = 30


class TipStep:
    """30 commits of tsc CPP at 100, then 3 at +3 % (0.3 % noise, 5 repetitions a job): a step
    the commit-level rank test cannot confirm yet (3 commits after it), so a suspect."""

    def __init__(self, client, session, sent_tasks):
        self.rng = np.random.default_rng(7)
        self.lab = Lab(client, session, sent_tasks, configs=(TSC,))
        self.agent = self.lab.agent("dut-01")
        self.session = session

    def values(self, i: int, _config: str) -> dict[str, list[float]]:
        level = 103.0 if i >= STEP_AT else 100.0
        cpp = level * (1 + 0.003 * self.rng.standard_normal(5))
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
    commits = {j.commit_id for j in confirm}
    assert row.suspect_commit_id in commits and commits <= set(row.commit_ids)
    assert all(j.round == 1 and j.state == "queued" and j.priority > 0 for j in confirm)
    assert all(f"at {shas[STEP_AT][:12]}" in j.reason and "unconfirmed regression" in j.reason for j in confirm)
    # claimed in the plan's seeded random order (the first plan has spent nothing), not in series order
    assert [j.commit_id for j in confirm] == list(run_order(row.commit_ids, (row.machine_id, row.config_id, 0)))
    assert tip.lab.alerts() == []  # not an alert

    pending = tip.lab.client.get("/api/v1/alerts/pending").json()["items"]
    assert {(p["metric"], p["state"], p["suspect"]["sha"]) for p in pending} >= {("cpp", "pending", shas[STEP_AT])}
    assert all(p["confirm_jobs"] >= 1 for p in pending)
    verdict = tip.check(shas[STEP_AT])
    assert (verdict["state"], verdict["exit_code"]) == ("pending", 2)
    assert "suspected change being confirmed" in verdict["detail"] and verdict["pending_suspects"]
    assert tip.check(shas[5])["state"] == "clean"  # commits far from it are not held up


def test_confirm_jobs_are_claimed_before_older_push_jobs(tip):
    tip.lab.push(2)  # push jobs queued after the confirmation rounds (newer ids) ...
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


def test_detection_decides_again_on_the_rounds_and_the_rounds_per_commit_stop_it(tip):
    shas = tip.lab.shas["main"]
    first = tip.jobs(JobPurpose.CONFIRM)
    status = tip.status(shas[STEP_AT])  # the forge hears "pending" while the rounds decide ...
    assert status.state == "pending" and status.description.startswith("confirming a suspected regression: cpp +")
    assert tip.status(shas[STEP_AT - 5]).state == "success"  # ... only for the commits the suspect names
    runs = tip.measure()  # round 1 arrives: ordinary runs, detection runs again
    assert len(runs) == len(first)
    [row] = [s for s in tip.suspects() if s.metric == "cpp"]
    assert row.state == "pending"  # still a suspect: round 2 was asked
    assert {j.round for j in tip.jobs(JobPurpose.CONFIRM)} == {1, 2}
    tip.measure()  # round 2 arrives: max rounds per commit (2 here) reached, nothing more is measured for it
    tip.session.refresh(row)
    assert row.state == "exhausted" and "confirmation stopped" in row.reason
    assert all(j.state == "done" for j in tip.jobs(JobPurpose.CONFIRM))
    baseline, extra = job_sql.repetitions_by_purpose(tip.session, row.machine_id, row.config_id, row.commit_ids + [row.suspect_commit_id])
    assert extra == 2 * 5 * len(set(j.commit_id for j in first))
    assert tip.check(shas[STEP_AT])["state"] != "pending"  # exhausted: the gate is not held forever
    assert tip.status(shas[STEP_AT]).state == "success"  # nor the forge status

    tip.lab.push(3)  # more commits at the new level confirm it: an alert, the suspect settles
    tip.measure()
    [group] = tip.lab.alerts()
    assert group["first_bad"]["sha"] == shas[STEP_AT] and group["direction"] == "regression"
    tip.session.refresh(row)
    assert row.state == "confirmed"
    assert tip.check(shas[STEP_AT])["state"] == "regressed"
    assert tip.status(shas[STEP_AT]).state == "failure"


def test_the_rounds_jobs_confirm_a_step_at_the_tip_before_more_commits_come(client, session, sent_tasks, monkeypatch):
    # A 33-commit series: room for 5 rounds of the 5 commits around the step (25 repetitions each). The
    # jobs' test spends 1e-4 over 12 looks, half on the medians: 2 commits against 3 need 4 rounds
    # (10 jobs against 15; after 3 rounds, 8 against 12, its smallest p is 2 / C(20, 8) = 1.6e-5).
    monkeypatch.setenv("PERFCI_CONFIRM_BUDGET_FRACTION", "0.8")
    get_settings.cache_clear()
    series = TipStep(client, session, sent_tasks)
    shas = series.lab.push(STEP_AT + 3)
    series.measure()
    assert series.lab.alerts() == []  # 3 commits after it: the test over commits cannot confirm it
    for _ in range(8):  # the rounds arrive, detection decides again on one value per job
        if not [j for j in series.jobs(JobPurpose.CONFIRM) if j.state == "queued"]:
            break
        series.measure()
    [group] = series.lab.alerts()
    assert group["first_bad"]["sha"] == shas[STEP_AT] and group["direction"] == "regression"
    assert {s.state for s in series.suspects() if s.metric == "cpp"} == {"confirmed"}
    assert max(j.round for j in series.jobs(JobPurpose.CONFIRM)) >= 4  # three rounds were not enough
    assert len(series.lab.shas["main"]) == STEP_AT + 3  # no new commit was needed
    assert series.status(shas[STEP_AT]).state == "failure"


def test_the_budget_is_respected(client, session, sent_tasks, monkeypatch):
    monkeypatch.setenv("PERFCI_CONFIRM_BUDGET_FRACTION", "0.05")  # 5 % of 33 x 5 repetitions: 8, a round of 5 commits is 25
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
    """The tip step on a host that drifts between sessions: every claim (one job, or an interleaved
    pair measured together) runs 2 % slower or faster at random (seeded), far beyond the 0.3 % noise
    of the repetitions inside it. Separate jobs of k - 1 and k differ by that drift; the two sides
    of one interleaved session share it."""

    def values(self, i: int, _config: str) -> dict[str, list[float]]:
        host = 1.0 + 0.02 * float(np.random.default_rng([11, len(self.lab.sessions)]).standard_normal())
        level = (103.0 if i >= STEP_AT else 100.0) * host
        cpp = level * (1 + 0.003 * self.rng.standard_normal(5))
        return {"cpp": cpp.tolist(), "pps": (2.1e9 * 0.97 / cpp).tolist()}


def confirmed_within(series: TipStep, rounds: int) -> bool:
    for _ in range(rounds):
        if series.lab.alerts() or not [j for j in series.jobs(JobPurpose.CONFIRM) if j.state == "queued"]:
            break
        series.measure()
    return bool(series.lab.alerts())


def test_each_round_measures_the_suspect_and_its_parent_interleaved_and_their_pairs_confirm_it(
        client, session, sent_tasks, monkeypatch):
    monkeypatch.setenv("PERFCI_CONFIRM_BUDGET_FRACTION", "0.9")
    monkeypatch.setenv("PERFCI_CONFIRM_PAIRED", "true")
    get_settings.cache_clear()
    series = DriftingHost(client, session, sent_tasks)
    shas = series.lab.push(STEP_AT + 3)
    series.measure()
    [row] = [s for s in series.suspects() if s.metric == "cpp"]
    assert row.suspect_commit_id == series.session.scalar(select(Commit.id).where(Commit.sha == shas[STEP_AT]))
    by_id = {j.id: j for j in series.jobs(JobPurpose.CONFIRM)}
    pairs = {frozenset((j.id, j.partner_job_id)) for j in by_id.values() if j.partner_job_id is not None}
    assert len(pairs) == 1  # the suspect's k - 1 and k, partners of each other; its other commits measured alone
    [(a, b)] = [tuple(p) for p in pairs]
    assert by_id[a].partner_job_id == b and by_id[b].partner_job_id == a
    ids = dict(series.session.execute(select(Commit.sha, Commit.id).where(Commit.sha.in_(shas[STEP_AT - 1:STEP_AT + 1]))).all())
    assert {by_id[a].commit_id, by_id[b].commit_id} == set(ids.values())

    assert confirmed_within(series, 8)
    assert sorted(len(s) for s in series.lab.sessions if len(s) == 2)  # the pairs were claimed together
    [group] = series.lab.alerts()
    assert group["first_bad"]["sha"] == shas[STEP_AT] and group["direction"] == "regression"
    paired_runs = series.session.execute(text(
        "SELECT r.job_id, r.paired_with FROM runs r WHERE r.paired_with IS NOT NULL AND r.status = 'ok'")).all()
    assert paired_runs and all((p, j) in set(paired_runs) for j, p in paired_runs)  # each side names the other


def test_with_separate_jobs_the_default_the_same_drifting_host_does_not_confirm_the_step(client, session, sent_tasks,
                                                                                    monkeypatch):
    monkeypatch.setenv("PERFCI_CONFIRM_BUDGET_FRACTION", "0.9")
    get_settings.cache_clear()
    series = DriftingHost(client, session, sent_tasks)
    series.lab.push(STEP_AT + 3)
    series.measure()
    assert [s for s in series.suspects() if s.metric == "cpp"]
    assert all(j.partner_job_id is None for j in series.jobs(JobPurpose.CONFIRM))
    assert not confirmed_within(series, 8)
