"""Detection in production, against the real PostgreSQL: results uploaded through the API by an
enrolled agent, the detection task the upload sent run in-process, alerts read back via the API."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from sqlalchemy import func, select

from tests.alerts.alerts_support import SIM, TSC, Lab, sim_values, tsc_values
from perfci_server.alerts import detection as alert_detection
from perfci_server.forge import statuses as forge_statuses
from perfci_server.models import Alert, AlertGroup, CommitStatus, Suspect
from perfci_server.settings import get_settings
from tests.server.server_support import ADMIN

pytestmark = pytest.mark.services

BASE_IPP = 81.72
STEP = 12  # index of the commit that adds instructions


def _counts(session):
    return tuple(session.scalar(select(func.count()).select_from(m)) for m in (AlertGroup, Alert))


@pytest.fixture
def sim_lab(client, session, sent_tasks):
    lab = Lab(client, session, sent_tasks, configs=(SIM,))
    lab.agent_row = lab.agent("dut-01")
    subjects = [f"fwd: tidy {i}" for i in range(20)]
    subjects[STEP] = "fwd: recompute the checksum per packet"
    lab.push(20, subjects=subjects)
    lab.measure(lambda i, _: sim_values(BASE_IPP * 1.029 if i >= STEP else BASE_IPP), lab.agent_row)
    lab.detect()
    return lab


def test_sim_step_gives_one_group_at_the_exact_commit_with_its_explanation(sim_lab, session):
    lab = sim_lab
    [group] = lab.alerts()
    shas = lab.shas["main"]
    assert group["first_bad"]["sha"] == shas[STEP] and group["last_good"]["sha"] == shas[STEP - 1]
    assert group["first_bad"]["position"] == group["last_good"]["position"] + 1
    assert group["first_bad"]["subject"] == "fwd: recompute the checksum per packet"
    assert "Ada Lovelace" in group["first_bad"]["author"]
    assert (group["direction"], group["status"], group["machine"], group["repository"], group["branch"]) == \
        ("regression", "untriaged", "dut-01", "perfci-org/dataplane", "main")
    [alert] = group["alerts"]  # the cache counters did not move: no alert for them
    assert (alert["config"], alert["metric"], alert["backend"], alert["direction"]) == ("sim-64B", "ipp", "sim", "regression")
    assert alert["before_median"] == pytest.approx(BASE_IPP) and alert["after_median"] == pytest.approx(BASE_IPP * 1.029)
    assert alert["change_pct"] == pytest.approx(2.9, abs=1e-9)
    assert alert["confidence"] == 1.0 and alert["p_value"] is None  # the exact rule, no statistics
    assert (alert["last_good_sha"], alert["first_bad_sha"]) == (shas[STEP - 1], shas[STEP])
    # The lean model names the cause; the summary is one sentence naming commit, machine and config.
    assert group["explanation"]["cause"] == "instructions"
    part = group["explanation"]["parts"][0]
    assert part["before"]["ipp"] == pytest.approx(BASE_IPP) and part["after"]["l1d_misses_pp"] == pytest.approx(0.0312)
    assert (part["commits_before"], part["commits_after"]) == (get_settings().explanation_window_commits, 20 - STEP)
    assert "IPP +2.9 %" in group["summary"] and shas[STEP][:12] in group["summary"] and "dut-01" in group["summary"]
    assert "sim-64B (sim simulated)" in group["summary"]
    assert lab.client.get(f"/api/v1/alerts/{group['id']}").json() == group


def test_a_simulated_store_forward_block_without_instructions_is_one_alert_naming_where(client, session, sent_tasks):
    # regression (f) as the sim backend reports it: IPP identical, one blocked load per packet
    lab = Lab(client, session, sent_tasks, configs=(SIM,))
    agent = lab.agent("dut-01")
    lab.push(20)
    lab.measure(lambda i, _: sim_values(BASE_IPP, 1.0 if i >= STEP else 0.0), agent)
    lab.detect()
    [group] = lab.alerts()
    shas = lab.shas["main"]
    assert group["first_bad"]["sha"] == shas[STEP] and group["last_good"]["sha"] == shas[STEP - 1]
    assert {a["metric"] for a in group["alerts"]} == {"sf_blocks_pp"}  # IPP did not move
    assert group["direction"] == "regression" and group["explanation"]["cause"] == "stalls"
    assert ("store-forward blocks per packet from zero (0 \u2192 1) in ttl_decrement (fwd.c:104)"
            in group["explanation"]["sentence"]), group["explanation"]["sentence"]
    assert "in ttl_decrement" in group["summary"]


def test_4k_aliases_never_alert_nor_explain_an_ipp_move(client, session, sent_tasks):
    # the demo's improvement: a helper inlined, 6.5 % fewer instructions, 4K aliases +18 % (layout)
    lab = Lab(client, session, sent_tasks, configs=(SIM,))
    agent = lab.agent("dut-01")
    lab.push(20)
    lab.measure(lambda i, _: sim_values(BASE_IPP * (0.935 if i >= STEP else 1.0), 0.0, 0.903 if i >= STEP else 0.765), agent)
    lab.detect()
    [group] = lab.alerts()
    assert group["direction"] == "improvement" and {a["metric"] for a in group["alerts"]} == {"ipp"}
    assert "4K" not in group["explanation"]["sentence"], group["explanation"]["sentence"]


def test_every_measured_commit_gets_a_verdict_failure_only_at_the_regression(sim_lab, session):
    lab = sim_lab
    shas = lab.shas["main"]
    rows = {s.commit_id: s for s in session.scalars(select(CommitStatus))}
    assert len(rows) == 20
    failing = [r for r in rows.values() if r.state == "failure"]
    [bad] = failing
    assert "regression: ipp +2.90% (sim-64B, sim)" in bad.description
    assert all(r.delivery == "disabled" for r in rows.values())  # no forge token configured: kept, not posted
    assert lab.sent_tasks.named(forge_statuses.POST_TASK) == []
    check = lab.client.get("/api/v1/alerts/check", params={"commit": shas[STEP]}).json()
    assert (check["state"], check["exit_code"]) == ("regressed", 1)
    assert [g["id"] for g in check["regressions"]] == [lab.alerts()[0]["id"]]
    clean = lab.client.get("/api/v1/alerts/check", params={"commit": shas[STEP + 1], "machine": "dut-01"}).json()
    assert (clean["state"], clean["exit_code"], len(clean["machines"])) == ("clean", 0, 1)


def test_redetection_updates_in_place_and_never_duplicates(sim_lab, session, sent_tasks):
    lab = sim_lab
    before = lab.alerts()
    counts = _counts(session)
    ids = sorted(session.scalars(select(Alert.id)))
    # The same tasks again (a redelivered message: every run is analysed already), then a
    # redetect of the whole branch x machine.
    for (machine_id,) in sent_tasks.named(alert_detection.DETECT_TASK):
        outcome = alert_detection.detect_pending(session, machine_id, get_settings())
        assert outcome.as_dict() == alert_detection.Outcome().as_dict()
    response = lab.client.post("/api/v1/alerts/detect", json={"repository_id": lab.repo["id"], "branch": "main",
                                                              "machine_id": lab.agent_row["machine_id"]}, headers=ADMIN)
    assert response.status_code == 202 and response.json() == {"configs": 1}
    (machine_id,) = sent_tasks.named(alert_detection.DETECT_TASK)[-1]
    assert alert_detection.detect_pending(session, machine_id, get_settings()).found == 1  # the series, examined again
    session.commit()
    assert _counts(session) == counts == (1, 1)
    assert sorted(session.scalars(select(Alert.id))) == ids
    after = lab.alerts()
    assert [(g["id"], g["first_bad"], g["alerts"]) for g in after] == [(g["id"], g["first_bad"], g["alerts"]) for g in before]


def test_metrics_of_several_configs_that_moved_in_overlapping_ranges_share_one_group(client, session, sent_tasks):
    lab = Lab(client, session, sent_tasks, configs=(SIM, TSC))
    agent = lab.agent("dut-01")
    rng = np.random.default_rng(7)
    step = 30
    lab.push(45)

    def values(i, config):
        if config == "sim-64B":
            return sim_values(BASE_IPP * (1.04 if i >= step else 1.0))
        return tsc_values(rng, 7.65 * (1.04 if i >= step else 1.0), 0.004)

    lab.measure(values, agent)
    lab.detect()
    [group] = lab.alerts()
    shas = lab.shas["main"]
    by_metric = {(a["config"], a["metric"]): a for a in group["alerts"]}
    assert set(by_metric) == {("sim-64B", "ipp"), ("self-64B", "cpp"), ("self-64B", "pps")}
    # The group's range is the narrowest one every metric agrees with: sim pins the exact commit.
    assert group["first_bad"]["sha"] == shas[step] and group["last_good"]["sha"] == shas[step - 1]
    tsc_range = (shas.index(by_metric[("self-64B", "cpp")]["last_good_sha"]), shas.index(by_metric[("self-64B", "cpp")]["first_bad_sha"]))
    assert tsc_range[0] < step <= tsc_range[1]
    assert by_metric[("self-64B", "pps")]["direction"] == "regression" and by_metric[("self-64B", "pps")]["change_pct"] < -3
    assert 0 < by_metric[("self-64B", "cpp")]["p_value"] < 1e-3
    assert {p["config"] for p in group["explanation"]["parts"]} == {"sim-64B", "self-64B"}
    tsc_part = next(p for p in group["explanation"]["parts"] if p["config"] == "self-64B")
    assert re.match(r"CPP \+(3\.[5-9]|4\.[0-5]) %", tsc_part["sentence"]), tsc_part["sentence"]
    assert tsc_part["decompositions"][0]["target"] == "cpp"
    assert lab.alerts(config="self-64B", metric="pps")[0]["id"] == group["id"]
    assert lab.alerts(metric="eipc") == []


class QuietThenNoisy:
    """30 quiet commits, then 4 commits 1.2 % slower (alerted); later the machine turns out to be
    noisy (45 commits at 6 % run-to-run noise), the learned minimum effect grows past 1.2 % and
    the detector no longer reports the change."""

    def __init__(self, client, session, sent_tasks):
        self.rng = np.random.default_rng(0)
        self.lab = Lab(client, session, sent_tasks, configs=(TSC,))
        self.agent = self.lab.agent("dut-01")

    def quiet_then_step(self):
        self.lab.push(34)
        self.lab.measure(lambda i, _: {"cpp": (100 * (1 + (0.012 if i >= 30 else 0) + 0.002 * self.rng.standard_normal(5))).tolist()}, self.agent)
        self.lab.detect()
        [group] = self.lab.alerts()
        assert group["first_bad"]["sha"] == self.lab.shas["main"][30]
        return group

    def noisy_tail(self):
        self.lab.push(45)
        self.lab.measure(lambda i, _: {"cpp": (100 * (1.006 + 0.06 * self.rng.standard_normal(5))).tolist()}, self.agent)
        return self.lab.detect()


def test_a_change_that_more_data_shows_to_be_noise_is_dropped(client, session, sent_tasks):
    series = QuietThenNoisy(client, session, sent_tasks)
    series.quiet_then_step()
    outcomes = series.noisy_tail()
    assert sum(o.dropped for o in outcomes) == 1
    assert series.lab.alerts() == [] and _counts(session) == (0, 0)
    verdicts = {s.commit_id: s.state for s in session.scalars(select(CommitStatus))}
    assert "failure" not in verdicts.values()  # the commits of the dropped range were re-judged ...
    named = {c for s in session.scalars(select(Suspect).where(Suspect.state == "pending")) for c in [s.suspect_commit_id, *s.commit_ids]}
    assert {c for c, state in verdicts.items() if state == "pending"} <= named  # ... pending only where a suspect is confirmed


def test_a_triaged_group_survives_when_detection_no_longer_reports_it(client, session, sent_tasks):
    series = QuietThenNoisy(client, session, sent_tasks)
    group = series.quiet_then_step()
    triaged = client.post(f"/api/v1/alerts/{group['id']}/triage", json={"status": "acknowledged", "note": "known: new rx path", "by": "ada"}, headers=ADMIN)
    assert triaged.status_code == 200, triaged.text
    assert sum(o.dropped for o in series.noisy_tail()) == 0
    [kept] = series.lab.alerts()
    assert (kept["id"], kept["status"], kept["triage_note"], kept["triaged_by"]) == (group["id"], "acknowledged", "known: new rx path", "ada")


def test_a_new_fingerprint_starts_a_new_series_and_no_alert_spans_two(client, session, sent_tasks):
    """The same host after a kernel upgrade is a new machine row: its 2.9 % higher IPP is not an
    alert, neither on the old machine (no data after) nor on the new one (no data before)."""
    lab = Lab(client, session, sent_tasks, configs=(SIM,))
    old = lab.agent("dut-01")
    lab.push(10)
    lab.measure(lambda i, _: sim_values(BASE_IPP), old)
    client.patch(f"/api/v1/machines/{old['machine_id']}", json={"enabled": False}, headers=ADMIN)
    new = lab.agent("dut-01", machine={**old["machine"], "kernel": "6.6.13-amd64"})
    assert new["machine_id"] != old["machine_id"]
    lab.push(10)
    lab.measure(lambda i, _: sim_values(BASE_IPP * 1.029), new)
    lab.detect()
    assert lab.alerts() == []
    checked = client.get("/api/v1/alerts/check", params={"commit": lab.shas["main"][12], "machine": "dut-01"}).json()
    assert (checked["state"], [m["machine_id"] for m in checked["machines"]]) == ("clean", [new["machine_id"]])


def test_bad_input_is_refused_or_skipped_and_detection_still_answers(client, session, sent_tasks, connection):
    lab = Lab(client, session, sent_tasks, configs=(TSC,))
    agent = lab.agent("dut-01")
    [only] = lab.push(1)
    # One point: nothing to compare with, no alert; the gate says so rather than calling it clean.
    lab.measure(lambda i, _: {"cpp": [7.6, 7.7, 7.5, 7.6, 7.65]}, agent)
    [outcome] = lab.detect()
    assert outcome.found == 0 and lab.alerts() == []
    gate = client.get("/api/v1/alerts/check", params={"commit": only}).json()
    assert (gate["exit_code"], gate["state"]) == (2, "pending") and "no baseline yet" in gate["detail"]
    # An unknown metric never reaches the database: the upload says why (422).
    lab.push(1)
    claim = client.post("/api/v1/agent/jobs/claim", headers=agent["headers"]).json()
    from tests.alerts.alerts_support import document
    bad = document(claim["commit"], TSC, {"cpp": [7.6, 7.7, 7.5, 7.6, 7.65]}, agent["fingerprint"], agent["machine"])
    import json as _json
    bad["samples"][2]["metrics"][0] = {"metric": "frobs_pp", "backend": "tsc", "value": 1.0}
    response = client.put(f"/api/v1/agent/jobs/{claim['job_id']}/attempts/{claim['attempt']}/result",
                          content=_json.dumps(bad), headers={**agent["headers"], "Content-Type": "application/json"})
    assert response.status_code == 422 and "frobs_pp" in response.text
    # Missing repetitions (a rep without cpp) and a NaN stored before validation existed: skipped.
    # A NaN in the upload is flagged in the run's notes and not stored (the rest of the run is).
    good = document(claim["commit"], TSC, {"cpp": [7.6, 7.7, 7.5, 7.6, 7.65], "pps": [2.6e8] * 5}, agent["fingerprint"], agent["machine"])
    good["samples"][1]["metrics"] = [m for m in good["samples"][1]["metrics"] if m["metric"] != "cpp"]
    good["samples"][2]["metrics"][0]["value"] = math.nan
    response = client.put(f"/api/v1/agent/jobs/{claim['job_id']}/attempts/{claim['attempt']}/result",
                          content=_json.dumps(good), headers={**agent["headers"], "Content-Type": "application/json"})
    assert response.status_code == 201, response.text
    assert any("impossible cpp (tsc) rep 2 = nan" in n for n in response.json()["notes"]), response.json()
    from sqlalchemy import text
    # rep 0 is the first of the run's samples: element 1 of the array
    session.execute(text("UPDATE metric_values SET rep_values[1] = 'NaN' WHERE metric = 'pps' AND run_id = :r"), {"r": response.json()["run_id"]})
    session.commit()
    [outcome] = lab.detect()
    assert outcome.found == 0 and lab.alerts() == []


def test_physically_impossible_values_never_become_an_alert(client, session, sent_tasks):
    """The last commits' uploads carry 0 cycles per packet (a broken busy-cycle count): taken at
    face value that is a -100 % CPP "improvement" over six commits. They are flagged in each run's
    notes and not stored, so detection sees only the real level and raises nothing."""
    lab = Lab(client, session, sent_tasks, configs=(TSC,))
    agent = lab.agent("dut-01")
    lab.push(24)
    rng = np.random.default_rng(4)

    def values(i, _):
        v = tsc_values(rng, 7.6, 0.005)
        if i >= 18:
            v["cpp"] = [0.0] * 5
        return v

    runs = lab.measure(values, agent)
    lab.detect()
    assert lab.alerts() == []
    from perfci_server.models import MetricValue, Run
    flagged = [session.get(Run, r).notes for r in runs[18:]]
    assert all(notes and "impossible cpp (tsc)" in notes[0] for notes in flagged), flagged
    assert session.scalar(select(func.count()).select_from(MetricValue).where(MetricValue.metric == "cpp",
                                                                                   MetricValue.run_id.in_(runs[18:]))) == 0


def test_a_confirmation_spends_its_alpha_over_the_sessions_the_server_allows():
    more = get_settings().model_copy(update={"confirm_looks": 5})
    assert alert_detection.detection_settings(get_settings()).confirm_looks == 3
    assert alert_detection.detection_settings(more).confirm_looks == 5
    assert alert_detection.window_version(more) != alert_detection.window_version(get_settings())  # no cache reused across
