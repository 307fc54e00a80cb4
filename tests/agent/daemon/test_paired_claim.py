"""A paired claim: the two jobs either side of a suspected change are measured interleaved in one
session, and each job is renewed, failed, released and uploaded on its own.

No server and no build: the agent talks to a fake client that records every request, and
``interleave`` answers with documents built from repetitions recorded on a loaded host
(benchmarks/detection/data/tsc-noise.json). Where ``interleave`` itself is under test, only its
git, build and ``measure`` calls are stood in for."""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfci_agent import interleave as interleave_mod
from perfci_agent import noisy
from perfci_agent.daemon import agent as daemon
from perfci_agent.daemon.config import load
from perfci_agent.daemon.mirror import FetchFailed
from perfci_agent.errors import BuildFailed, UsageError
from perfci_agent.interleave import Interleaved
from perfci_agent.measure import Stopped
from perfci_agent.server_api import ApiError
from perfci_core.result import BenchConfig, MetricValue, ResultDocument, Sample, Tuning

RECORDED = Path(__file__).resolve().parents[3] / "benchmarks" / "detection" / "data" / "tsc-noise.json"
NOW = datetime(2026, 11, 23, tzinfo=timezone.utc)
BASE, HEAD = "a" * 40, "c" * 40
SEED = 4242
PAIR_CLAIM = {"job_id": 11, "attempt": 2, "lease_seconds": 60, "clone_url": "file:///nowhere", "commit": BASE,
              "config": BenchConfig().model_dump(mode="json"), "backend": "tsc", "repetitions": 8,
              "queued_at": "2026-11-23T00:00:00Z",  # a ClaimedJob field the agent does not use
              "partner": {"job_id": 12, "attempt": 1, "commit": HEAD}, "pair_seed": SEED}
SOLO_CLAIM = {k: v for k, v in PAIR_CLAIM.items() if k not in ("partner", "pair_seed")}  # a claim from before pairs


def recorded_jobs() -> list[list[float]]:
    return [job["cpp"] for job in json.loads(RECORDED.read_text())["jobs"]]


def tsc_document(commit: str, cpp: list[float], status: str = "ok", reason: str | None = None) -> ResultDocument:
    samples = [Sample(rep=i, metrics=[MetricValue(metric="cpp", backend="tsc", value=v)]) for i, v in enumerate(cpp)]
    return ResultDocument(status=status, reason=reason, commit=commit, config=BenchConfig(), backend="tsc", machine={},
                          machine_id="b" * 64, samples=samples, started_at=NOW, finished_at=NOW)


def measured_pair() -> Interleaved:
    base, head = recorded_jobs()[:2]
    return Interleaved(tsc_document(BASE, base), tsc_document(HEAD, head), SEED)


# --- a server that records what the agent asks ------------------------------------------------

class FakeServer:
    def __init__(self) -> None:
        self.requests: list[tuple] = []
        self.lost: set[int] = set()  # job ids whose lease renewal answers 409

    def of(self, kind: str) -> list[tuple]:
        return [r[1:] for r in self.requests if r[0] == kind]


class FakeClient:
    def __init__(self, server: FakeServer) -> None:
        self.server = server

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def renew_lease(self, job_id: int, attempt: int) -> dict:
        self.server.requests.append(("renew", job_id, attempt))
        if job_id in self.server.lost:
            raise ApiError(409, "conflict", "the lease expired and the job was requeued")
        return {}

    def upload_result(self, job_id: int, attempt: int, body: bytes) -> SimpleNamespace:
        doc = ResultDocument.model_validate_json(body)
        self.server.requests.append(("upload", job_id, attempt, doc))
        return SimpleNamespace(json=lambda: {"run_id": job_id, "run_status": doc.status, "job_state": "done",
                                             "samples": len(doc.samples)})

    def report_failure(self, job_id: int, attempt: int, reason: str, log_tail: str | None = None) -> dict:
        self.server.requests.append(("failure", job_id, attempt, reason, log_tail))
        return {}

    def release(self, job_id: int, attempt: int, reason: str) -> dict:
        self.server.requests.append(("release", job_id, attempt, reason))
        return {"job_state": "queued"}


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


@pytest.fixture
def tuned(monkeypatch) -> list[str]:
    """The tuned-state gate's deviations (none unless a test adds some)."""
    deviations: list[str] = []
    monkeypatch.setattr(daemon.host, "tuned_state", lambda *a: Tuning(ok=not deviations, deviations=list(deviations)))
    return deviations


@pytest.fixture
def fetched(monkeypatch, tmp_path) -> SimpleNamespace:
    """The mirror's fetches as (clone_url, commit); a commit in ``broken`` cannot be fetched."""
    state = SimpleNamespace(calls=[], broken=set())

    def fetch(mirrors, clone_url: str, sha: str) -> tuple[Path, str]:
        state.calls.append((clone_url, sha))
        if sha in state.broken:
            raise FetchFailed(f"commit {sha} is not in {clone_url}", "fatal: remote error")
        return tmp_path / "mirror.git", "cached"

    monkeypatch.setattr(daemon.MirrorCache, "fetch", fetch)
    return state


def make_agent(tmp_path: Path, server: FakeServer, **env: str) -> daemon.Agent:
    cfg = load(None, environ={"PERFCI_AGENT_SERVER_URL": "http://127.0.0.1:1", "PERFCI_AGENT_MACHINE_NAME": "m",
                              "PERFCI_AGENT_STATE_DIR": str(tmp_path / "state"), **env})
    a = daemon.Agent(cfg, stop=threading.Event())
    a.backends = ["tsc"]
    a.machine = daemon.identity.Machine({}, "b" * 64)
    a.client = lambda: FakeClient(server)  # type: ignore[method-assign]
    return a


@pytest.fixture
def agent(tmp_path, server, tuned, fetched) -> daemon.Agent:
    return make_agent(tmp_path, server)


def answer_interleave(monkeypatch, answer) -> list[dict]:
    """The daemon's ``interleave`` records its arguments and returns (or raises) ``answer(call, agent)``."""
    calls: list[dict] = []

    def fake(repo, base, head, pairs, **kw):
        call = {"repo": repo, "base": base, "head": head, "pairs": pairs, **kw}
        calls.append(call)
        return answer(call)

    monkeypatch.setattr(daemon, "interleave", fake)
    return calls


def claim(raw: dict = PAIR_CLAIM, **changes) -> daemon.Claim:
    return daemon.Claim.model_validate({**raw, **changes})


def uploaded(server: FakeServer) -> list[tuple[int, int, str, str]]:
    return [(job_id, attempt, doc.commit, doc.status) for job_id, attempt, doc in server.of("upload")]


# --- both sides measured ------------------------------------------------------------------------

def test_a_pair_claim_uploads_each_side_to_its_own_job_and_attempt(agent, server, fetched, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="perfci_agent.daemon")
    calls = answer_interleave(monkeypatch, lambda call: measured_pair())
    agent.work(claim())
    assert [(c["base"], c["head"], c["pairs"]) for c in calls] == [(BASE, HEAD, 8)]
    assert fetched.calls == [("file:///nowhere", BASE), ("file:///nowhere", HEAD)]
    assert uploaded(server) == [(11, 2, BASE, "ok"), (12, 1, HEAD, "ok")]
    base, head = recorded_jobs()[:2]
    docs = [doc for _, _, doc in server.of("upload")]
    assert [[s.metrics[0].value for s in d.samples] for d in docs] == [base, head]
    assert not server.of("release") and not server.of("failure")
    assert agent.spool.pending() == []
    for text in ("claimed with job 12 attempt 1", "fetch cached", "measured: ok (8 sample(s), backend tsc)",
                 f"pair order seed {SEED}", "finished in"):
        assert text in caplog.text


def test_both_leases_are_renewed_while_the_pair_is_measured(tmp_path, server, tuned, fetched, monkeypatch):
    agent = make_agent(tmp_path, server)

    def measure_until_both_renewed(call):
        deadline = time.monotonic() + 10
        while {job_id for job_id, _ in server.of("renew")} != {11, 12} and time.monotonic() < deadline:
            time.sleep(0.05)
        return measured_pair()

    answer_interleave(monkeypatch, measure_until_both_renewed)
    agent.work(claim(lease_seconds=3))  # renewed every second
    assert {(11, 2), (12, 1)} <= set(server.of("renew"))
    assert uploaded(server) == [(11, 2, BASE, "ok"), (12, 1, HEAD, "ok")]


def test_the_tuned_state_is_merged_into_both_documents(agent, server, tuned, monkeypatch):
    tuned.append("cpufreq governor is powersave on core 2")
    answer_interleave(monkeypatch, lambda call: measured_pair())
    agent.work(claim())
    docs = [doc for _, _, doc in server.of("upload")]
    assert len(docs) == 2 and all(d.tuning.deviations == list(tuned) and not d.tuning.ok for d in docs)


def test_refuse_untuned_fails_both_jobs_without_measuring(tmp_path, server, tuned, fetched, monkeypatch):
    tuned.append("turbo is on")
    agent = make_agent(tmp_path, server, PERFCI_AGENT_REFUSE_UNTUNED="true")
    calls = answer_interleave(monkeypatch, lambda call: measured_pair())
    agent.work(claim())
    assert not calls and not server.of("upload")
    assert [(job_id, attempt) for job_id, attempt, reason, _ in server.of("failure")] == [(11, 2), (12, 1)]
    assert all("refuse_untuned" in reason for _, _, reason, _ in server.of("failure"))


def test_noisy_marks_are_uploaded_as_they_are_without_measuring_the_pair_again(agent, server, monkeypatch, tmp_path):
    noisy_base = noisy.mark(tsc_document(BASE, recorded_jobs()[2]), tmp_path / "noise", None)
    assert noisy_base.noisy is not None
    calls = answer_interleave(monkeypatch, lambda call: Interleaved(noisy_base, tsc_document(HEAD, [80.0] * 8), SEED))
    agent.work(claim())
    assert len(calls) == 1
    docs = {job_id: doc for job_id, _, doc in server.of("upload")}
    assert docs[11].noisy == noisy_base.noisy and docs[12].noisy is None


@pytest.mark.parametrize("cfg_repetitions, pairs", [("0", 8), ("5", 5)])
def test_the_pair_is_measured_with_the_seed_and_exactly_the_arguments_of_a_solo_job(
        tmp_path, server, tuned, fetched, monkeypatch, cfg_repetitions, pairs):
    agent = make_agent(tmp_path, server, PERFCI_AGENT_SIM_FAMILY="intel-icx", PERFCI_AGENT_CORES="3,5",
                       PERFCI_AGENT_REPETITIONS=cfg_repetitions, PERFCI_AGENT_BACKENDS="tsc")
    solo: list[dict] = []
    monkeypatch.setattr(daemon, "measure", lambda **kw: solo.append(kw) or tsc_document(BASE, [80.0] * 8))
    agent._measure_trusted(claim(SOLO_CLAIM, backend="auto"), tmp_path / "mirror.git", SimpleNamespace(lost=None))
    calls = answer_interleave(monkeypatch, lambda call: measured_pair())
    agent.work(claim(backend="auto"))
    (call,), (alone,) = calls, solo
    assert call["seed"] == SEED and call["pairs"] == alone["reps"] == pairs
    shared = ("repo", "backend", "config", "core", "cache_dir", "sim_family", "cores")
    assert {k: call[k] for k in shared} == {k: alone[k] for k in shared}
    assert call["sim_family"] == "intel-icx" and call["cores"] == [3, 5] and call["core"] == 3
    assert call["backend"] == "tsc"  # "auto" in the job: this agent's best backend, as for a solo job


# --- one side failed ----------------------------------------------------------------------------

def test_a_side_that_does_not_build_is_uploaded_and_its_partner_released(agent, server, monkeypatch):
    broken = tsc_document(HEAD, [], status="build_failed", reason=f"build failed at {HEAD[:12]}: compile failed")
    # interleave's own answer for the side it did not measure
    answer_interleave(monkeypatch, lambda call: interleave_mod._failed_builds({"base": BASE, "head": HEAD},
                                                                                  {"head": broken}, SEED))
    agent.work(claim())
    assert uploaded(server) == [(12, 1, HEAD, "build_failed")]
    (released,) = server.of("release")
    assert released[:2] == (11, 2) and released[2].startswith("not measured: the head commit does not build")
    assert not server.of("failure")


def test_a_run_failure_in_a_later_pair_uploads_both_sides(agent, server, monkeypatch):
    base, head = recorded_jobs()[:2]
    failed = tsc_document(HEAD, head[:3], status="run_failed", reason="pair 3: run 1/1 failed: dataplane exited 139")
    answer_interleave(monkeypatch, lambda call: Interleaved(tsc_document(BASE, base[:3]), failed, SEED))
    agent.work(claim())
    assert uploaded(server) == [(11, 2, BASE, "ok"), (12, 1, HEAD, "run_failed")]
    assert not server.of("release") and not server.of("failure")


# --- stops, errors and lost leases ---------------------------------------------------------------

def test_a_stop_during_the_pair_releases_both_jobs(agent, server, monkeypatch):
    def stopped(call):
        agent.stop.set()
        assert call["should_stop"]()
        raise Stopped(3, 8)

    answer_interleave(monkeypatch, stopped)
    agent.work(claim())
    assert [(job_id, attempt) for job_id, attempt, _ in server.of("release")] == [(11, 2), (12, 1)]
    assert all("agent stopping" in reason for _, _, reason in server.of("release"))
    assert not server.of("upload") and not server.of("failure")


def test_a_stop_that_interrupts_a_run_releases_both_jobs(agent, server, monkeypatch):
    base, head = recorded_jobs()[:2]

    def interrupted(call):
        agent.stop.set()
        return Interleaved(tsc_document(BASE, base[:2]),
                           tsc_document(HEAD, head[:2], status="run_failed", reason="pair 2: run 1/1 failed: signal 15"), SEED)

    answer_interleave(monkeypatch, interrupted)
    agent.work(claim())
    assert [(job_id, attempt) for job_id, attempt, _ in server.of("release")] == [(11, 2), (12, 1)]
    assert not server.of("upload")


@pytest.mark.parametrize("error, reason", [(UsageError("unknown commit 'c'"), "cannot measure: unknown commit 'c'"),
                                           (RuntimeError("boom"), "agent error: RuntimeError: boom")])
def test_a_measure_error_or_an_agent_bug_fails_both_jobs(agent, server, monkeypatch, error, reason):
    def fails(call):
        raise error

    answer_interleave(monkeypatch, fails)
    agent.work(claim())
    failures = server.of("failure")
    assert [(job_id, attempt, why) for job_id, attempt, why, _ in failures] == [(11, 2, reason), (12, 1, reason)]
    if isinstance(error, RuntimeError):
        assert all("RuntimeError: boom" in log_tail for *_, log_tail in failures)  # the traceback's tail
    assert not server.of("upload") and not server.of("release")


def test_a_commit_that_cannot_be_fetched_fails_both_jobs(agent, server, fetched, monkeypatch):
    fetched.broken.add(HEAD)
    calls = answer_interleave(monkeypatch, lambda call: measured_pair())
    agent.work(claim())
    assert not calls and not server.of("upload")
    failures = server.of("failure")
    assert [(job_id, attempt) for job_id, attempt, *_ in failures] == [(11, 2), (12, 1)]
    assert "partner job 12" in failures[0][2] and f"commit {HEAD} is not in" in failures[1][2]


def wait_until(condition, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_lost_lease_discards_that_side_and_the_other_is_uploaded(tmp_path, server, tuned, fetched, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="perfci_agent.daemon")
    agent = make_agent(tmp_path, server)
    server.lost.add(12)

    def lost_during_the_last_run(call):
        wait_until(call["should_stop"])  # the lost lease asks interleave to stop
        assert call["should_stop"]()
        return measured_pair()

    answer_interleave(monkeypatch, lost_during_the_last_run)
    agent.work(claim(lease_seconds=3))
    assert uploaded(server) == [(11, 2, BASE, "ok")]
    assert not server.of("release") and not server.of("failure")
    assert "job 12 attempt 1 commit cccccccccccc config self-64B: result discarded" in caplog.text


def test_a_lost_lease_that_stops_the_pair_releases_only_the_partner(tmp_path, server, tuned, fetched, monkeypatch):
    agent = make_agent(tmp_path, server)
    server.lost.add(11)

    def stopped_by_the_lost_lease(call):
        wait_until(call["should_stop"])
        raise Stopped(2, 8)

    answer_interleave(monkeypatch, stopped_by_the_lost_lease)
    agent.work(claim(lease_seconds=3))
    (released,) = server.of("release")
    assert released[:2] == (12, 1) and "lease was lost" in released[2]
    assert not server.of("upload") and not server.of("failure")


# --- old claims ---------------------------------------------------------------------------------

def test_an_old_claim_without_a_partner_validates_and_takes_the_solo_path(agent, server, monkeypatch):
    job = claim(SOLO_CLAIM)
    assert job.partner is None and job.pair_seed is None
    calls = answer_interleave(monkeypatch, lambda call: pytest.fail("a solo job is not interleaved"))
    measured: list[dict] = []
    monkeypatch.setattr(daemon, "measure", lambda **kw: measured.append(kw) or tsc_document(BASE, [80.0] * 8))
    agent.work(job)
    assert not calls and [kw["commit"] for kw in measured] == [BASE]
    assert uploaded(server) == [(11, 2, BASE, "ok")]


# --- interleave itself: the pass-through to measure ---------------------------------------------

@pytest.fixture
def stand_ins(monkeypatch, tmp_path) -> SimpleNamespace:
    """``interleave`` without git or a build: its ``measure`` calls are recorded; a commit in
    ``broken`` does not build, the runs of a commit in ``failing`` fail."""
    state = SimpleNamespace(calls=[], broken=set(), failing=set())

    class Workspace:
        def __init__(self, root, cache_dir):
            self.cache_dir = cache_dir or tmp_path / "cache"

        def build(self, sha, on_step=None):
            if sha in state.broken:
                raise BuildFailed("compile failed", "fwd.c: error")
            return SimpleNamespace(cached=True)

    def measure(root, sha, **kw):
        state.calls.append({"commit": sha, **kw})
        if sha in state.broken:
            return tsc_document(sha, [], status="build_failed", reason="build failed: compile failed")
        if sha in state.failing:
            return tsc_document(sha, [], status="run_failed", reason="run 1/1 failed: dataplane exited 139")
        return tsc_document(sha, [80.0 + len(state.calls)])

    monkeypatch.setattr(interleave_mod, "repo_root", lambda repo: Path(repo))
    monkeypatch.setattr(interleave_mod, "resolve_commit", lambda root, rev: rev)
    monkeypatch.setattr(interleave_mod, "Workspace", Workspace)
    monkeypatch.setattr(interleave_mod, "measure", measure)
    return state


def test_interleave_without_the_new_arguments_measures_as_before(stand_ins, tmp_path):
    done = interleave_mod.interleave(tmp_path, BASE, HEAD, 2, seed=1, backend="tsc", cache_dir=tmp_path / "cache")
    assert done.ok and len(stand_ins.calls) == 4
    assert all(c["sim_family"] is None and c["cores"] is None for c in stand_ins.calls)


def test_a_paired_job_reaches_every_measure_call_with_sim_family_and_cores(tmp_path, server, tuned, fetched, stand_ins):
    agent = make_agent(tmp_path, server, PERFCI_AGENT_SIM_FAMILY="intel-icx", PERFCI_AGENT_CORES="3,5")
    agent.work(claim(repetitions=3))
    assert len(stand_ins.calls) == 6 and {c["commit"] for c in stand_ins.calls} == {BASE, HEAD}
    assert all(c["sim_family"] == "intel-icx" and c["cores"] == [3, 5] and c["core"] == 3 for c in stand_ins.calls)
    assert uploaded(server) == [(11, 2, BASE, "ok"), (12, 1, HEAD, "ok")]
    assert [[s.rep for s in doc.samples] for _, _, doc in server.of("upload")] == [[0, 1, 2], [0, 1, 2]]


@pytest.mark.parametrize("failure, status, reason", [
    ("failing", "run_failed", "not measured: the base commit's run failed"),
    ("broken", "build_failed", "not measured: the base commit does not build"),
])
def test_a_side_that_fails_on_its_own_is_uploaded_and_the_other_released(tmp_path, server, tuned, fetched, stand_ins,
                                                                         failure, status, reason):
    getattr(stand_ins, failure).add(BASE)
    agent = make_agent(tmp_path, server)
    agent.work(claim())
    assert uploaded(server) == [(11, 2, BASE, status)]
    (released,) = server.of("release")
    assert released[:2] == (12, 1) and released[2] == reason
    assert not server.of("failure")
