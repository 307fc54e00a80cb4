"""Detection at the speed of ingest, against the real PostgreSQL: the window cached between
detections (alerts.window) gives exactly what a full read gives, a lost, stale or damaged cache is
rebuilt, and a commit uploaded late (older than the window) is analysed around its position."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import delete, select, update

from tests.alerts.alerts_support import SIM, TSC, Lab, sim_values, tsc_values
from perfci_core.analysis import detect
from perfci_server.alerts import series_repository as series_sql
from perfci_server.alerts import detection as alert_detection
from perfci_server.alerts import window as window_cache
from perfci_server.alerts.window import Window
from perfci_server.models import BranchCommit, Commit, DetectionWindow, Job, JobState
from perfci_server.settings import get_settings

pytestmark = pytest.mark.services

BASE_IPP = 81.72


def _ids(lab: Lab, session, config: str) -> tuple[int, int, int]:
    agent = next(iter(lab.agents.values()))
    branch_id = session.scalar(select(BranchCommit.branch_id).join(Commit, Commit.id == BranchCommit.commit_id)
                               .where(Commit.sha == lab.shas["main"][0]))
    return branch_id, agent["machine_id"], lab.configs[config]["id"]


def _snapshot(session, branch_id: int, machine_id: int, config_id: int, settings, use_cache: bool):
    measured = series_sql.measured_commits(session, branch_id, machine_id, config_id, settings.detection_window_commits)
    pending = series_sql.pending_commits(session, machine_id, config_id)
    fresh = set(series_sql.positions_of(session, branch_id, pending).values())
    window = alert_detection._window(session, branch_id, machine_id, config_id, measured, fresh, settings, use_cache)
    series = {key: (s.commits, [x.tolist() for x in s.samples], s.medians.tolist()) for key, s in window.series().items()}
    changes = alert_detection.window_changes(window, config_id)
    # the changes and the suspects (what confirmation rounds are asked for) of every series
    return series, {key: (found, result.suspects if result is not None else ()) for key, (found, result) in changes.items()}


@pytest.mark.parametrize(("seed", "decoded_kept"), [(1, window_cache.DECODED_KEPT), (2, 0)])
def test_the_cached_window_gives_exactly_what_a_full_read_gives(client, session, sent_tasks, monkeypatch, seed, decoded_kept):
    """Random noisy (tsc) and deterministic (sim) series with steps, uploaded in batches of random
    size, the window sliding past its size: at every detection the cached window and the changes
    found on it equal a full read of the tables; the sim shortcut equals detect() on the series.
    Seed 1 reuses the window this process wrote (window.decode), seed 2 decodes it every time."""
    monkeypatch.setattr(window_cache, "DECODED_KEPT", decoded_kept)
    rng = np.random.default_rng(seed)
    settings = get_settings().model_copy(update={"detection_window_commits": 25})
    lab = Lab(client, session, sent_tasks, configs=(SIM, TSC))
    agent = lab.agent("dut-01")
    tsc_step, sim_steps = int(rng.integers(15, 45)), sorted(rng.choice(np.arange(5, 60), 3, replace=False).tolist())
    noise = {i: tsc_values(rng, 7.65 * (1.06 if i >= tsc_step else 1.0), 0.01) for i in range(70)}

    def values(i: int, config: str) -> dict[str, list[float]]:
        if config == "sim-64B":
            return sim_values(BASE_IPP * 1.03 ** sum(i >= s for s in sim_steps), sf_blocks_pp=0.25 * (i >= sim_steps[1]))
        return noise[i]

    seen_changes = 0
    while len(lab.shas.get("main", [])) < 70:
        lab.push(min(int(rng.integers(1, 9)), 70 - len(lab.shas.get("main", []))))
        lab.measure(values, agent)
        for config in ("sim-64B", "self-64B"):
            ids = _ids(lab, session, config)
            cached, cached_changes = _snapshot(session, *ids, settings, use_cache=True)
            full, full_changes = _snapshot(session, *ids, settings, use_cache=False)
            assert cached == full
            assert cached_changes == full_changes
            seen_changes += sum(len(found) for found, _ in full_changes.values())
        alert_detection.detect_pending(session, agent["machine_id"], settings)
        session.commit()
    assert seen_changes > 0  # the steps were inside the window at some detection

    # The sim shortcut (only pairs whose medians differ) against the detector on the whole series.
    branch_id, machine_id, config_id = _ids(lab, session, "sim-64B")
    measured = series_sql.measured_commits(session, branch_id, machine_id, config_id, 1000)
    window = alert_detection._window(session, branch_id, machine_id, config_id, measured, set(), settings, False)
    for (metric, backend), series in window.series().items():
        whole = detect(series, metric, backend, alert_detection.DETECTION).changes
        assert [(c.last_good, c.first_bad, c.rel_change) for c in alert_detection._analyse(series, metric, backend)[0]] == \
            [(c.last_good, c.first_bad, c.rel_change) for c in whole]


def _sim_lab(client, session, sent_tasks, n: int) -> tuple[Lab, dict]:
    lab = Lab(client, session, sent_tasks, configs=(SIM,))
    agent = lab.agent("dut-01")
    lab.push(n)
    return lab, agent


def _alerts(lab: Lab) -> list[tuple[str | None, str, str]]:
    return sorted((a["last_good_sha"], a["first_bad_sha"], a["metric"]) for g in lab.alerts() for a in g["alerts"])


def test_a_lost_stale_or_damaged_window_is_rebuilt_and_changes_nothing(client, session, sent_tasks):
    lab, agent = _sim_lab(client, session, sent_tasks, 30)
    lab.measure(lambda i, _: sim_values(BASE_IPP * (1.029 if i >= 12 else 1.0)), agent)
    lab.detect()
    expected = _alerts(lab)
    assert expected == [(lab.shas["main"][11], lab.shas["main"][12], "ipp")]
    ids = _ids(lab, session, "sim-64B")
    window = session.get(DetectionWindow, ids)
    assert window is not None and window.version == alert_detection.window_version(get_settings())

    def redetect_with(damage) -> None:
        damage()
        session.commit()
        alert_detection.request_redetection(session, ids[0], ids[1])
        session.commit()
        lab.detect()
        assert _alerts(lab) == expected
        row = session.get(DetectionWindow, ids)
        assert row is not None and row.version == alert_detection.window_version(get_settings())

    redetect_with(lambda: session.execute(delete(DetectionWindow)))  # lost
    redetect_with(lambda: session.execute(update(DetectionWindow).values(version="other settings")))  # stale
    redetect_with(lambda: session.execute(update(DetectionWindow).values(data=b"not a window")))  # damaged
    # A window that no longer agrees with the tables (here: it holds another commit at a position).
    row = session.get(DetectionWindow, ids)
    w = Window.loads(row.data)
    w.commit_ids[max(w.commit_ids)] = -1
    data = w.dumps()
    redetect_with(lambda: session.execute(update(DetectionWindow).values(data=data)))


def test_a_late_upload_is_analysed_around_its_position(client, session, sent_tasks):
    """300 commits measured, commit 50 (where the level steps) uploaded last. The window of the last
    200 measured commits never contains commit 50: the backlog's detection analyses the old runs
    around their positions (the step is somewhere in 49..51), and the late upload of commit 50 is
    analysed around its own position, which pins the step to it."""
    lab, agent = _sim_lab(client, session, sent_tasks, 300)
    shas = lab.shas["main"]
    late = session.scalar(select(Commit.id).where(Commit.sha == shas[50]))
    session.execute(update(Job).where(Job.commit_id == late).values(state=JobState.FAILED.value))  # held back
    session.commit()
    def ipp(i, _):
        return sim_values(BASE_IPP * (1.029 if i >= 50 else 1.0))
    lab.measure(ipp, agent)
    lab.detect()
    assert _alerts(lab) == [(shas[49], shas[51], "ipp")]

    session.execute(update(Job).where(Job.commit_id == late).values(state=JobState.QUEUED.value))
    session.commit()
    assert len(lab.measure(ipp, agent)) == 1
    lab.detect()
    assert _alerts(lab) == [(shas[49], shas[50], "ipp")]
    [group] = lab.alerts()
    assert group["first_bad"]["position"] == group["last_good"]["position"] + 1 == 50
    # Detection again over the window alone leaves it (it lies before what that window judges).
    ids = _ids(lab, session, "sim-64B")
    alert_detection.request_redetection(session, ids[0], ids[1])
    session.commit()
    lab.detect()
    assert _alerts(lab) == [(shas[49], shas[50], "ipp")]


def test_with_the_window_cached_a_detection_reads_only_the_commits_with_new_runs(client, session, sent_tasks, monkeypatch):
    lab, agent = _sim_lab(client, session, sent_tasks, 30)
    def ipp(i, _):
        return sim_values(BASE_IPP * (1.029 if i >= 12 else 1.0))
    lab.measure(ipp, agent)
    lab.detect()  # builds the window
    read: list[list[int]] = []
    real = series_sql.window_runs

    def recording(session, branch_id, machine_id, config_id, positions):
        read.append(list(positions))
        return real(session, branch_id, machine_id, config_id, positions)

    monkeypatch.setattr(series_sql, "window_runs", recording)
    new = lab.push(2)
    lab.measure(ipp, agent)
    lab.detect()
    positions = {c: p for c, p in session.execute(select(Commit.sha, BranchCommit.position)
                                                 .join(BranchCommit, BranchCommit.commit_id == Commit.id))}
    assert read[0] == sorted(positions[sha] for sha in new)  # the window: only the two new commits
    assert _alerts(lab) == [(lab.shas["main"][11], lab.shas["main"][12], "ipp")]

    read.clear()  # without the cache (or with it lost) the whole window is read, with the same verdict
    session.execute(delete(DetectionWindow))
    session.commit()
    lab.push(1)
    lab.measure(ipp, agent)
    lab.detect()
    assert len(read[0]) == 33
    assert _alerts(lab) == [(lab.shas["main"][11], lab.shas["main"][12], "ipp")]


def test_a_window_decoded_in_this_process_is_reused_only_for_its_own_bytes():
    rows = [(p, 100 + p, f"{p:040x}", "cpp", "tsc", 1000 + p, [7.6, 7.7, 7.65], False, 0) for p in range(3)]
    window = Window()
    window.slide_to([(p, 100 + p) for p in range(3)])
    window.put_runs(rows, range(3))
    data = window.dumps()
    window_cache.remember(data, window)
    assert window_cache.decode(data) is window  # the object that wrote these bytes ...
    again = window_cache.decode(data)  # ... handed out once: the caller updates it
    assert again is not window and again.dumps() == data
    other = Window()
    other.slide_to([(0, 100)])
    other.put_runs(rows[:1], [0])
    window_cache.remember(other.dumps(), other)
    assert window_cache.decode(data) is not other  # different bytes are decoded, never mixed up
    with pytest.raises((ValueError, OSError)):
        window_cache.decode(b"not a window")


def test_a_window_keeps_each_commits_jobs_through_storage_and_a_noisy_job_counts_once():
    rows = [(0, 100, "a" * 40, "cpp", "tsc", 7, [7.6, 7.7, 7.65], False, 0)]
    rows += [(0, 100, "a" * 40, "cpp", "tsc", 9, [9.0, 12.0, 15.0], True, 0)]  # a confirmation round, marked noisy
    rows += [(1, 101, "b" * 40, "cpp", "tsc", 8, [7.5, 7.6], False, 0)]
    window = Window()
    window.slide_to([(0, 100), (1, 101)])
    window.put_runs(rows, range(2))
    again = Window.loads(window.dumps())
    for w in (window, again):
        series = w.series()[("cpp", "tsc")]
        assert [x.tolist() for x in series.samples] == [[7.6, 7.7, 7.65, 12.0], [7.5, 7.6]]
        assert series.runs == ((3, 1), (2,))
        assert series.run_medians(0, 2).tolist() == [7.65, 12.0, 7.55]


def test_a_window_keeps_interleaved_sessions_through_storage_and_pairs_their_repetitions():
    rows = [(0, 100, "a" * 40, "cpp", "tsc", 7, [7.6, 7.7, 7.65], False, 0)]  # the commit's own job
    rows += [(0, 100, "a" * 40, "cpp", "tsc", 9, [7.1, 7.2, 7.3], False, 40)]  # session 40, side a
    rows += [(1, 101, "b" * 40, "cpp", "tsc", 10, [8.1, 8.2, 8.3], False, 40)]  # session 40, side b
    rows += [(1, 101, "b" * 40, "cpp", "tsc", 11, [8.0, 8.4], False, 55)]  # its partner never arrived
    rows += [(2, 102, "c" * 40, "cpp", "tsc", 12, [7.5, 7.6], False, 0)]
    window = Window()
    window.slide_to([(0, 100), (1, 101), (2, 102)])
    window.put_runs(rows, range(3))
    again = Window.loads(window.dumps())
    for w in (window, again):
        series = w.series()[("cpp", "tsc")]
        assert series.runs == ((3, 3), (3, 2), (2,)) and series.pairs == ((0, 40), (40, 55), (0,))
        [(before, after)] = series.sessions()[(0, 1)]
        assert before.tolist() == [7.1, 7.2, 7.3] and after.tolist() == [8.1, 8.2, 8.3]
        assert list(series.sessions()) == [(0, 1)]  # session 55 lost its partner: no pairs
        own = series.own()  # the commits' own level: the sessions left out, commit b had nothing else
        assert [x.tolist() for x in own.samples] == [[7.6, 7.7, 7.65], [7.5, 7.6]]


def test_a_slid_window_starts_at_a_block_edge_and_its_search_is_searched_on(client, session, sent_tasks):
    """analysis.detect, incremental: a window that slid starts at a multiple of the block (an
    eighth of a 120-commit window: 15), so two detections a few commits apart see the same start
    and the second searches on from the first's search (the memo kept with the decoded window)
    over the new commits only; the equality with a search from scratch is the test above's."""
    settings = get_settings().model_copy(update={"detection_window_commits": 120})
    rng = np.random.default_rng(4)
    lab = Lab(client, session, sent_tasks, configs=(TSC,))
    agent = lab.agent("dut-01")

    def values(i: int, config: str) -> dict[str, list[float]]:
        return tsc_values(rng, 7.65, 0.01)

    for batch in (130, 2):
        lab.push(batch)
        lab.measure(values, agent)
        alert_detection.detect_pending(session, agent["machine_id"], settings)
        session.commit()
    ids = _ids(lab, session, "self-64B")
    row = series_sql.detection_window(session, *ids)
    window = window_cache.decode(row.data)
    assert window.positions[0] == 15  # 132 commits: the last 120 start at 12 (0-based), the block edge at 15
    assert len(window.positions) == 117
    searched = {key: memo for key, memo in window.memos.items() if key[1] == "tsc" and memo.segmenter is not None}
    assert searched  # the noisy series were searched with their memos
    for memo in searched.values():
        # the second detection kept the first's search up to the commits it re-measured (a suspect's
        # rounds) or the new ones; the first searched its 115 commits
        assert memo.reused >= 0.8 * 117
        assert memo.searched <= 115 + 0.2 * 117


def test_a_run_that_lost_a_repetition_keeps_the_rest_and_leaves_its_session():
    rows = [(0, 100, "a" * 40, "cpp", "tsc", 9, [7.1, float("nan"), 7.3], False, 40)]  # session 40, side a: one lost
    rows += [(1, 101, "b" * 40, "cpp", "tsc", 10, [8.1, 8.2, 8.3], False, 40)]  # side b
    rows += [(1, 101, "b" * 40, "cpp", "tsc", 11, [8.0, float("inf")], False, 0)]
    rows += [(1, 101, "b" * 40, "ipp", "tsc", 10, [2.0, 2.1, 2.2], False, 40)]  # another metric of the same runs: intact
    window = Window()
    window.slide_to([(0, 100), (1, 101)])
    window.put_runs(rows, range(2))
    cpp, ipp = window.series()[("cpp", "tsc")], window.series()[("ipp", "tsc")]
    assert [x.tolist() for x in cpp.samples] == [[7.1, 7.3], [8.1, 8.2, 8.3, 8.0]]
    assert cpp.runs == ((2,), (3, 1)) and cpp.pairs == ((40,), (40, 0))  # still the session's, never the commit's own ...
    assert cpp.sessions() == {}  # ... but unpaired: the order of side a no longer matches b's
    assert cpp.medians.tolist() == pytest.approx([7.2, 8.15])
    assert [x.tolist() for x in ipp.samples] == [[2.0, 2.1, 2.2]] and ipp.pairs == ((40,),)
