"""Result upload: validation (422, nothing changes), idempotency, series bit for bit, compare."""

from __future__ import annotations

import hashlib
import json
import math
import random
import struct
from datetime import datetime

import pytest
from sqlalchemy import func, select

from perfci_server.models import Job, MetricValue, Run, Sample
from perfci_server.settings import get_settings
from tests.server.server_support import ADMIN, GITHUB_COMMITS, MACHINE, enroll, result_document

pytestmark = pytest.mark.services


@pytest.fixture
def setup(queued_jobs):
    return queued_jobs


def _claim(client, agent):
    response = client.post("/api/v1/agent/jobs/claim", headers=agent["headers"])
    assert response.status_code == 200, response.text
    return response.json()


def _upload(client, agent, job, document, attempt=None):
    body = document if isinstance(document, (bytes, str)) else json.dumps(document)
    return client.put(
        f"/api/v1/agent/jobs/{job['job_id']}/attempts/{attempt or job['attempt']}/result",
        content=body,
        headers={**agent["headers"], "Content-Type": "application/json"},
    )


def _stored(session):
    """(samples, values): one metric_values row holds the values of every sample of its run."""
    values = sum(v is not None for row in session.scalars(select(MetricValue.rep_values)) for v in row)
    return session.scalar(select(func.count()).select_from(Sample)), values


def test_upload_stores_samples_and_raw_counts_and_finishes_the_job(client, session, setup):
    agent = setup["agent"]
    job = _claim(client, agent)
    response = _upload(client, agent, job, result_document(job["commit"]))
    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["run_status"], body["job_state"], body["samples"], body["metric_values"], body["duplicate"]) == ("ok", "done", 5, 10, False)
    assert _stored(session) == (5, 10)
    assert session.scalar(select(func.count()).select_from(MetricValue)) == 2  # cpp and pps, 5 values each
    sample = session.scalars(select(Sample).order_by(Sample.rep)).first()
    assert sample.raw["tsc.busy_cycles"] == 15_220_000.0 and sample.raw["pmu.cycles"] is None


def test_retrying_the_same_upload_is_idempotent_and_a_different_one_conflicts(client, session, setup):
    agent = setup["agent"]
    job = _claim(client, agent)
    document = result_document(job["commit"])
    assert _upload(client, agent, job, document).status_code == 201
    again = _upload(client, agent, job, document)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    different = result_document(job["commit"], values={"cpp": [9.0] * 5})
    assert _upload(client, agent, job, different).status_code == 409
    assert _stored(session) == (5, 10)


def _bad_documents(commit):
    unknown = result_document(commit, values={"cpp": [7.6] * 5})
    unknown["samples"][2]["metrics"].append({"metric": "bogomips", "backend": "tsc", "value": 1.0})
    wrong_backend = result_document(commit, values={"eipc": [1.5] * 5})  # eipc is pmu-only; doc says tsc
    wrong_commit = result_document("e" * 40)
    wrong_machine = result_document(commit, machine_id="ab" * 32)
    wrong_config = result_document(commit, config={"pkt_size": 128})
    no_reason = result_document(commit, status="build_failed")
    no_reason.pop("reason")
    return {
        "unknown metric": (unknown, "bogomips"),
        "wrong backend": (wrong_backend, "does not measure eipc"),
        "not json": ("{", "invalid result document"),
        "wrong commit": (wrong_commit, "not the job's commit"),
        "wrong machine": (wrong_machine, "machine_id"),
        "wrong config": (wrong_config, "does not match the job's config"),
        "failure without reason": (no_reason, "reason"),
    }


def test_invalid_uploads_are_422_with_a_clear_message_and_change_nothing(client, session, setup):
    agent = setup["agent"]
    job = _claim(client, agent)
    for label, (document, expected) in _bad_documents(job["commit"]).items():
        response = _upload(client, agent, job, document)
        assert response.status_code == 422, (label, response.text)
        assert expected in response.json()["error"]["message"], (label, response.json())
    assert _stored(session) == (0, 0)
    assert session.get(Job, job["job_id"]).state == "leased"
    assert session.scalars(select(Run.status)).all() == ["running"]
    assert _upload(client, agent, job, result_document(job["commit"])).status_code == 201  # still uploadable


def test_impossible_values_are_flagged_not_stored_and_the_rest_of_the_run_is_kept(client, session, setup):
    """Zero or negative cycles per packet, NaN, infinity and a negative raw count are not
    measurements: the upload is accepted, they are named in the run's notes and left out of the
    stored values (the series, detection and compare never see them); the other values stay."""
    agent = setup["agent"]
    job = _claim(client, agent)
    document = result_document(job["commit"], values={"cpp": [7.6, 0.0, -1.0, 7.7, 7.8], "pps": [3.1e7] * 5})
    document["samples"][0]["raw"]["tsc.packets"] = -2_000_000.0
    body = json.dumps(document).replace('"value": 7.8', '"value": NaN').replace('"value": 7.7', '"value": Infinity')
    response = _upload(client, agent, job, body)
    assert response.status_code == 201, response.text
    accepted = response.json()
    assert accepted["samples"] == 5 and accepted["metric_values"] == 5 + 1  # pps x 5, cpp only at rep 0
    notes = accepted["notes"]
    assert any(n.startswith("impossible cpp (tsc) rep 1 = 0.0: cycles/packet must be > 0") for n in notes), notes
    assert any(n.startswith("impossible cpp (tsc) rep 2 = -1.0: cycles/packet cannot be negative") for n in notes), notes
    assert any("rep 3 = inf" in n and "rep 4 = nan" in n and "not a finite number" in n for n in notes), notes
    assert any(n.startswith("impossible raw count tsc.packets rep 0 = -2000000.0") for n in notes), notes
    stored = session.scalars(select(MetricValue.rep_values).where(MetricValue.metric == "cpp")).all()
    assert stored == [[7.6, None, None, None, None]]  # reps 1-4 keep their places
    run = session.get(Run, accepted["run_id"])
    assert run.status == "ok" and run.notes == notes
    assert session.scalars(select(Sample).where(Sample.rep == 0)).one().raw["tsc.packets"] is None
    shown = client.get(f"/api/v1/jobs/{job['job_id']}", headers={"Authorization": "Bearer perfci-development-admin-token"})
    assert shown.json()["runs"][-1]["notes"] == notes
    again = _upload(client, agent, job, body)  # the same upload again: recognised, not a conflict
    assert again.status_code == 200 and again.json()["duplicate"] is True and again.json()["notes"] == notes


def test_oversized_upload_is_413(client, session, setup):
    agent = setup["agent"]
    job = _claim(client, agent)
    body = b"{" + b" " * get_settings().upload_max_bytes + b"}"
    assert _upload(client, agent, job, body).status_code == 413
    assert _stored(session) == (0, 0)


def test_another_agents_upload_is_refused(client, setup):
    agent = setup["agent"]
    job = _claim(client, agent)
    other = enroll(client, "other", machine={"cpu": "elsewhere"})
    assert _upload(client, other, job, result_document(job["commit"])).status_code == 404


def test_build_failure_ends_the_job_without_samples(client, session, setup):
    agent = setup["agent"]
    job = _claim(client, agent)
    response = _upload(client, agent, job, result_document(job["commit"], status="build_failed"))
    assert response.status_code == 201
    assert (response.json()["run_status"], response.json()["job_state"]) == ("build_failed", "failed")
    assert session.scalar(select(Run.reason)) == "meson: compile error in fwd.c"


def test_series_returns_every_uploaded_value_bit_for_bit_in_commit_order(client, session, setup):
    agent, repo = setup["agent"], setup["repo"]
    rng = random.Random(20240502)
    awkward = [0.1 + 0.2, 5e-324, 1.7976931348623157e308, 1 / 3, 123456789.12345679, 0.0, 2.0**-1074 * 3]
    uploaded: dict[str, list[float]] = {}
    for index in range(3):
        job = _claim(client, agent)
        values = [awkward[(index * 5 + i) % len(awkward)] if i % 2 else rng.uniform(0, 1e12) for i in range(5)]
        uploaded[job["commit"]] = values
        response = _upload(client, agent, job, result_document(job["commit"], values={"cpp": values}))
        assert response.status_code == 201, response.text

    params = {"repository_id": repo["id"], "branch": "main", "machine_id": agent["machine_id"], "config": "self-64B", "metric": "cpp", "backend": "tsc"}
    series = client.get("/api/v1/series", params=params).json()
    assert [p["commit"] for p in series["points"]] == GITHUB_COMMITS
    assert [p["position"] for p in series["points"]] == [0, 1, 2]
    assert series["unit"] == "cycles/packet" and series["direction"] == "lower"
    for point in series["points"]:
        got = [s["value"] for s in point["samples"]]
        assert [s["rep"] for s in point["samples"]] == [0, 1, 2, 3, 4]
        assert [struct.pack("<d", v) for v in got] == [struct.pack("<d", v) for v in uploaded[point["commit"]]]

    page = client.get("/api/v1/series", params={**params, "limit": 2}).json()
    assert [p["position"] for p in page["points"]] == [0, 1] and page["next_after_position"] == 1
    rest = client.get("/api/v1/series", params={**params, "limit": 2, "after_position": 1}).json()
    assert [p["position"] for p in rest["points"]] == [2] and rest["next_after_position"] is None
    assert client.get("/api/v1/series", params={**params, "backend": "pmu"}).json()["points"] == []
    assert client.get("/api/v1/series", params={**params, "metric": "nope"}).status_code == 404


def test_compare_two_commits(client, setup):
    agent, repo = setup["agent"], setup["repo"]
    base_job, head_job = _claim(client, agent), _claim(client, agent)
    _upload(client, agent, base_job, result_document(base_job["commit"], values={"cpp": [7.6, 7.7, 7.5, 7.65, 7.62], "pps": [3e7] * 5}))
    _upload(client, agent, head_job, result_document(head_job["commit"], values={"cpp": [8.1, 8.2, 8.0, 8.15, 8.3], "pps": [3e7] * 5}))
    params = {"repository_id": repo["id"], "base": base_job["commit"], "head": head_job["commit"], "machine_id": agent["machine_id"], "config": "self-64B"}
    response = client.get("/api/v1/compare", params=params)
    assert response.status_code == 200, response.text
    by_metric = {m["metric"]: m for m in response.json()["metrics"]}
    cpp = by_metric["cpp"]
    assert (cpp["base_median"], cpp["head_median"], cpp["n_base"], cpp["n_head"]) == (7.62, 8.15, 5, 5)
    assert math.isclose(cpp["change_pct"], (8.15 - 7.62) / 7.62 * 100)
    assert cpp["p_value"] < 0.05 and cpp["worse"] is True
    assert cpp["verdict"] == "different"  # the analysis core's two-sample verdict
    assert by_metric["pps"]["change_pct"] == 0.0 and by_metric["pps"]["worse"] is False
    assert by_metric["pps"]["verdict"] == "same"


def test_a_sim_result_matches_its_job_with_the_packet_counts_sim_caps(client, session, setup):
    """`sim` runs at most SIM_PACKETS/SIM_WARMUP packets and says so; the job's config is larger."""
    agent = setup["agent"]
    job = _claim(client, agent)
    capped = {"packets": 100_000, "warmup": 2_000}
    sim = {"ipp": [81.72] * 2}
    uncapped = result_document(job["commit"], backend="sim", reps=2, values=sim)
    response = _upload(client, agent, job, uncapped)
    assert response.status_code == 422 and "does not match the job's config" in response.text
    tsc_capped = result_document(job["commit"], config=capped)
    assert _upload(client, agent, job, tsc_capped).status_code == 422  # only sim is capped
    response = _upload(client, agent, job, result_document(job["commit"], config=capped, backend="sim", reps=2, values=sim))
    assert response.status_code == 201, response.text


def _on(machine: dict) -> dict:
    """A result measured on ``machine`` (the document's machine and its hash, as the agent makes them)."""
    return {"machine": machine, "machine_id": hashlib.sha256(json.dumps(machine, sort_keys=True).encode()).hexdigest()}


def test_a_result_from_the_same_machine_retuned_is_kept(client, setup):
    """Hugepages reserved (or the governor set) while the agent ran: host state, recorded with the
    run; the measurement is the enrolled machine's and is kept, not refused for good."""
    agent = setup["agent"]
    job = _claim(client, agent)
    retuned = {**MACHINE, "governor": "powersave", "hugepages_total": 256}
    document = {**result_document(job["commit"]), **_on(retuned)}
    response = _upload(client, agent, job, document)
    assert response.status_code == 201, response.text


def test_a_result_from_another_machine_is_refused(client, setup):
    agent = setup["agent"]
    job = _claim(client, agent)
    document = {**result_document(job["commit"]), **_on({**MACHINE, "cpu_model": "AMD EPYC 9654", "hugepages_total": 256})}
    response = _upload(client, agent, job, document)
    assert response.status_code == 422, response.text
    assert "differs in more than its host state" in response.json()["error"]["message"]



def test_a_reused_sim_result_is_stored_with_the_run_it_came_from(client, session, setup):
    """The agent did not simulate again (the same binary, config and tool measured before on this
    machine): the run keeps where its samples come from and the run that measurement was uploaded
    as, which the job's detail shows; a measurement this server never received has no run."""
    agent = setup["agent"]
    capped, sim = {"packets": 100_000, "warmup": 2_000}, {"ipp": [81.72] * 2}
    measured_job, reused_job, unknown_job = _claim(client, agent), _claim(client, agent), _claim(client, agent)
    measured = result_document(measured_job["commit"], config=capped, backend="sim", reps=2, values=sim)
    assert _upload(client, agent, measured_job, measured).status_code == 201
    origin = {"commit": measured_job["commit"], "started_at": measured["started_at"], "finished_at": measured["finished_at"]}
    reused = {**result_document(reused_job["commit"], config=capped, backend="sim", reps=2, values=sim), "reused_from": origin}
    response = _upload(client, agent, reused_job, reused)
    assert response.status_code == 201, response.text

    measured_run = session.scalar(select(Run.id).where(Run.job_id == measured_job["job_id"]))
    shown = client.get(f"/api/v1/jobs/{reused_job['job_id']}", headers=ADMIN).json()["runs"][0]["reused_from"]
    assert shown["run_id"] == measured_run and shown["commit"] == measured_job["commit"]
    assert datetime.fromisoformat(shown["started_at"]) == datetime.fromisoformat(measured["started_at"])
    assert client.get(f"/api/v1/jobs/{measured_job['job_id']}", headers=ADMIN).json()["runs"][0]["reused_from"] is None

    never_uploaded = {**origin, "started_at": "2026-01-02T03:04:05.000006+00:00"}
    document = {**result_document(unknown_job["commit"], config=capped, backend="sim", reps=2, values=sim), "reused_from": never_uploaded}
    assert _upload(client, agent, unknown_job, document).status_code == 201
    assert client.get(f"/api/v1/jobs/{unknown_job['job_id']}", headers=ADMIN).json()["runs"][0]["reused_from"]["run_id"] is None


def test_only_an_ok_sim_result_can_be_reused(client, session, setup):
    agent = setup["agent"]
    job = _claim(client, agent)
    origin = {"commit": job["commit"], "started_at": "2026-01-02T03:04:05+00:00", "finished_at": "2026-01-02T03:04:09+00:00"}
    response = _upload(client, agent, job, {**result_document(job["commit"]), "reused_from": origin})  # tsc
    assert response.status_code == 422 and "only an ok sim result reuses" in response.text
    assert _stored(session) == (0, 0)
