"""The result spool (atomic, replayed after a restart, refusals kept) and the retry schedule."""

from __future__ import annotations

import os
import random
import stat

import pytest

from perfci_agent.daemon import spool as spool_module
from perfci_agent.daemon.backoff import Backoff
from perfci_agent.daemon.spool import Spool
from perfci_agent.server_api import ApiError, ServerUnreachable, is_transient

DOC = b'{"schema": "perfci.result/1", "status": "ok"}'


def test_a_spooled_document_survives_a_restart_byte_for_byte(tmp_path):
    first = Spool(tmp_path / "spool")
    item = first.put(12, 1, DOC)
    assert stat.S_IMODE(item.path.stat().st_mode) == 0o600
    replayed = Spool(tmp_path / "spool").pending()  # a new process sees what the old one wrote
    assert [(s.job_id, s.attempt, s.body) for s in replayed] == [(12, 1, DOC)]
    first.done(replayed[0])
    assert Spool(tmp_path / "spool").pending() == []


def test_pending_is_in_job_order_and_skips_what_is_not_a_result(tmp_path):
    sp = Spool(tmp_path)
    for job, attempt in ((10, 1), (9, 2), (9, 1), (100, 1)):
        sp.put(job, attempt, DOC)
    (tmp_path / "notes.txt").write_text("not a result")
    assert [(s.job_id, s.attempt) for s in sp.pending()] == [(9, 1), (9, 2), (10, 1), (100, 1)]


def test_an_interrupted_write_leaves_the_previous_state_and_no_document(tmp_path, monkeypatch):
    sp = Spool(tmp_path)
    sp.put(1, 1, DOC)

    def crash(src, dst):
        raise OSError("disk went away")

    monkeypatch.setattr(spool_module.os, "replace", crash)
    with pytest.raises(OSError):
        sp.put(2, 1, b'{"half": ')
    monkeypatch.undo()
    assert [(s.job_id, s.body) for s in sp.pending()] == [(1, DOC)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job-1-attempt-1.json", "rejected"]


def test_a_temporary_file_left_by_a_crash_is_removed_at_replay(tmp_path):
    sp = Spool(tmp_path)
    sp.ensure()
    (tmp_path / ".tmp-job-3-attempt-1.json.4242").write_bytes(b'{"half": ')
    assert sp.pending() == []
    assert not (tmp_path / ".tmp-job-3-attempt-1.json.4242").exists()


def test_a_refused_document_is_kept_with_its_reason(tmp_path):
    sp = Spool(tmp_path)
    item = sp.put(5, 2, DOC)
    kept = sp.reject(item, "422 unprocessable: result does not belong to this job")
    assert sp.pending() == []
    assert kept == tmp_path / "rejected" / "job-5-attempt-2.json" and kept.read_bytes() == DOC
    assert "does not belong" in (tmp_path / "rejected" / "job-5-attempt-2.json.reason").read_text()


def test_backoff_grows_exponentially_to_the_cap_with_jitter():
    b = Backoff(base=1.0, factor=2.0, cap=30.0, rng=random.Random(7))
    assert [b.envelope(n) for n in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    delays = b.delays()
    drawn = [next(delays) for _ in range(200)]
    for n, d in enumerate(drawn):
        assert b.envelope(n) / 2 <= d <= b.envelope(n)
    capped = drawn[10:]
    assert len(set(capped)) == len(capped)  # jittered: agents do not retry in lockstep
    assert min(capped) < 20 and max(capped) > 25  # spread over the upper half of the cap
    assert b.envelope(10_000) == 30.0  # no float overflow after days of retries


def test_backoff_rejects_nonsense():
    for kwargs in ({"base": 0}, {"factor": 0.5}, {"base": 10, "cap": 1}):
        with pytest.raises(ValueError):
            Backoff(**kwargs)


@pytest.mark.parametrize(("exc", "transient"), [
    (ServerUnreachable("refused"), True),
    (ApiError(503, "unavailable", "db down"), True),
    (ApiError(500, "internal", "bug"), True),
    (ApiError(429, "slow_down", ""), True),
    (ApiError(408, "timeout", ""), True),
    (ApiError(409, "conflict", "not current"), False),
    (ApiError(422, "unprocessable", "bad"), False),
    (ApiError(401, "unauthorized", "revoked"), False),
])
def test_which_failures_are_retried(exc, transient):
    assert is_transient(exc) is transient


def test_write_atomically_never_widens_the_mode(tmp_path):
    old = os.umask(0)
    try:
        spool_module.write_atomically(tmp_path / "f", b"x", 0o600)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "f").stat().st_mode) == 0o600
