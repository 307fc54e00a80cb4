"""Token file (0600, refused when others can read it), the enrollment record, backend choice."""

from __future__ import annotations

import json
import os
import stat

import pytest

from perfci_agent.daemon import host, identity
from perfci_agent.daemon.config import load


@pytest.fixture
def cfg(tmp_path):
    return load(None, environ={"PERFCI_AGENT_SERVER_URL": "http://127.0.0.1:1", "PERFCI_AGENT_MACHINE_NAME": "m",
                               "PERFCI_AGENT_STATE_DIR": str(tmp_path / "state")})


def test_the_token_is_written_0600_whatever_the_umask(cfg):
    old = os.umask(0o022)
    try:
        identity.write_token(cfg.token_path, "pca_secret")
    finally:
        os.umask(old)
    assert stat.S_IMODE(cfg.token_path.stat().st_mode) == 0o600
    assert identity.read_token(cfg.token_path) == "pca_secret"
    assert identity.token_mode_problem(cfg.token_path) is None


def test_a_token_file_others_can_read_is_refused(cfg):
    identity.write_token(cfg.token_path, "pca_secret")
    cfg.token_path.chmod(0o644)
    with pytest.raises(identity.IdentityError, match=r"mode 0644; it must be 0600 \(chmod 600"):
        identity.read_token(cfg.token_path)


def test_no_token_file_means_not_enrolled_and_enrolling_needs_a_token(cfg):
    assert identity.read_token(cfg.token_path) is None
    with pytest.raises(identity.IdentityError, match="no enrollment_token is configured"):
        identity.enroll(cfg, client=None, machine=identity.Machine({}, "0" * 64), backends=["sim"], version="x")  # type: ignore[arg-type]
    cfg.token_path.parent.mkdir(parents=True)
    cfg.token_path.write_text("\n")
    cfg.token_path.chmod(0o600)
    with pytest.raises(identity.IdentityError, match="is empty"):
        identity.read_token(cfg.token_path)


def test_a_changed_fingerprint_is_detected_and_named(cfg):
    cfg.state_dir.mkdir(parents=True)
    enrolled = identity.Machine({"kernel": "6.1.0-18", "cpu_microcode": "0x2b", "core": 2}, "a" * 64)
    cfg.enrollment_path.write_text(json.dumps({"machine_fingerprint": enrolled.machine_id, "machine": enrolled.details}))
    identity.check_enrollment_record(cfg, enrolled)  # unchanged: fine
    upgraded = identity.Machine({"kernel": "6.1.0-21", "cpu_microcode": "0x2b", "core": 2}, "b" * 64)
    with pytest.raises(identity.IdentityError, match=r"identity changed since enrollment \(kernel\)"):
        identity.check_enrollment_record(cfg, upgraded)


def test_this_machine_is_the_fingerprint_measure_records():
    from perfci_agent import fingerprint

    core = max(os.sched_getaffinity(0))
    m = identity.this_machine(core)
    assert m.machine_id == fingerprint.machine_id(fingerprint.collect(core)) and m.details["core"] == core


def test_backends_offered_and_chosen():
    here = {"pmu": "no PMU: perf reports instructions <not supported>", "sim": None, "tsc": None}
    assert host.usable_backends(["auto"], here) == (["sim", "tsc"], [])
    usable, problems = host.usable_backends(["pmu", "tsc"], here)
    assert usable == ["tsc"] and problems == ["backend pmu is configured but cannot run here: no PMU: perf reports instructions <not supported>"]
    assert host.backend_for_job("sim", ["auto"], ["sim", "tsc"]) == "sim"
    assert host.backend_for_job("auto", ["auto"], ["sim", "tsc"]) == "auto"  # measure's own choice, with its reason
    assert host.backend_for_job("auto", ["tsc", "sim"], ["sim", "tsc"]) == "sim"  # our best allowed one


def test_tuned_state_adds_perf_access_only_when_pmu_may_be_used(monkeypatch):
    machine = identity.this_machine(max(os.sched_getaffinity(0)))
    monkeypatch.setattr(host.ev, "read_paranoid", lambda: 3)
    monkeypatch.setattr(host.ev.os, "geteuid", lambda: 1000)
    with_pmu = host.tuned_state(machine.details["core"], machine, ["auto"])
    sim_only = host.tuned_state(machine.details["core"], machine, ["sim"])
    assert any("perf_event_paranoid is 3" in d for d in with_pmu.deviations) and not with_pmu.ok
    assert not any("perf_event_paranoid" in d for d in sim_only.deviations)
    merged = host.merge(sim_only, with_pmu)
    assert merged.deviations == with_pmu.deviations and merged.ok is False
