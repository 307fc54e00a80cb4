"""Suspects, their confirmation and the adaptive policy, on simulated series: a session measures a
suspect's bracket interleaved (both sides of a pair share the host's state), a round of an unpinned
change adds one job of each commit around it (the detection benchmark's loop, in small)."""

from __future__ import annotations

import numpy as np
import pytest

from perfci_core.analysis import Kind, Point, Settings, Suspect, detect
from perfci_core.analysis.adaptive import Policy, plan, run_order
from perfci_core.analysis.detect.confirmation import look_level

REPS = 3


class Loop:
    """Commits c000, c001, ... at true ``levels``, each measured once by a job on a host slower or
    faster by ``host_drift`` (relative sd per job); sessions and rounds drawn from the same model."""

    def __init__(self, levels: np.ndarray, cv: float = 0.003, seed: int = 0, host_drift: float = 0.0,
                 policy: Policy = Policy(), settings: Settings = Settings()):
        self.rng, self.levels, self.cv, self.drift = np.random.default_rng(seed), levels, cv, host_drift
        self.policy, self.settings = policy, settings
        self.values = {self.name(i): self.job(i, self.host()) for i in range(len(levels))}
        self.jobs = {c: [REPS] for c in self.values}
        self.keys = {c: [0] for c in self.values}
        self.rounds: dict[str, int] = {}
        self.sessions = 0
        self.spent = 0
        self.plans = []

    @staticmethod
    def name(i: int) -> str:
        return f"c{i:03d}"

    def host(self) -> float:
        return 1.0 + self.drift * self.rng.standard_normal()

    def job(self, i: int, host: float, reps: int = REPS) -> list[float]:
        return list(self.levels[i] * host * (1 + self.cv * self.rng.standard_normal(reps)))

    def points(self) -> list[Point]:
        return [Point.of(c, v, self.jobs[c], self.keys[c]) for c, v in self.values.items()]

    def detect(self):
        return detect(self.points(), "cpp", "tsc", self.settings)

    def add(self, commit: str, values: list[float], key: int) -> None:
        self.values[commit] += values
        self.jobs[commit].append(len(values))
        self.keys[commit].append(key)

    def run(self, max_loops: int = 12):
        result = self.detect()
        for _ in range(max_loops):
            p = plan(result.suspects, self.rounds, self.spent, REPS * len(self.values), REPS, self.policy)
            self.plans.append(p)
            if not p.requests:
                break
            for q in p.requests:
                i = int(q.commit[1:])
                if q.partner is None:
                    self.add(q.commit, self.job(i, self.host()), 0)
                    self.spent += REPS
                elif q.commit < q.partner:  # one session for both sides: one host state
                    host, self.sessions = self.host(), self.sessions + 1
                    for c in (q.commit, q.partner):
                        self.add(c, self.job(int(c[1:]), host, q.repetitions), self.sessions)
                    self.spent += 2 * q.repetitions
                self.rounds[q.commit] = q.round
            result = self.detect()
        return result


def test_an_unpinned_change_is_pinned_to_its_commit_by_extra_rounds():
    # 3 repetitions cannot pin a change at the per-commit test's alpha (3 vs 15 runs: p >= 0.0025)
    loop = Loop(np.where(np.arange(40) >= 25, 104.0, 100.0), cv=0.01)
    before = loop.detect()
    [change] = before.changes
    assert change.suspect == "c025" and not change.pinned and not change.confirmed
    [suspect] = before.suspects
    assert suspect.why == "unpinned" and suspect.kind is Kind.REGRESSION and {"c024", "c025"} <= set(suspect.commits)
    after = loop.run()
    [change] = after.changes
    assert change.pinned and change.suspect == "c025" and after.suspects == ()
    assert 0 < loop.spent <= 0.3 * REPS * 40 and loop.sessions == 0  # rounds, no session


def test_a_step_the_commits_own_jobs_cannot_confirm_is_confirmed_by_the_sessions_of_its_bracket():
    """Every job runs on a host 2 % slower or faster: a +3 % step ten commits from the tip is no change on the
    commits' own jobs, at most a suspect. Its bracket's sessions share the host inside each pair, so their
    pairs confirm it at the confirmation's level, with the step among the candidates; nothing is confirmed
    elsewhere."""
    levels = np.where(np.arange(200) >= 190, 103.0, 100.0)
    confirmed = 0
    for seed in range(6):
        loop = Loop(levels, seed=seed, host_drift=0.02)
        assert loop.detect().changes == ()
        changes = loop.run().changes
        assert len(changes) <= 1 and loop.spent <= 0.3 * REPS * 200
        for change in changes:
            assert change.confirmed and change.kind is Kind.REGRESSION and "c190" in change.candidates
            assert abs(int(change.suspect[1:]) - 190) <= 2 and 0.015 < change.rel_change < 0.045
            assert change.p_value <= look_level(Settings().confirm_looks, Settings())
            confirmed += 1
    assert confirmed >= 2


def test_sessions_of_a_level_that_never_moved_confirm_nothing():
    for seed in range(4):
        loop = Loop(np.full(200, 100.0), seed=20 + seed, host_drift=0.04)
        assert loop.run().changes == ()


def test_a_session_that_says_same_ends_the_confirmation():
    """A bump of one busy job per commit (30-33, 2 % slow) is a suspect; its bracket's first session shows the
    two commits the same, and nothing more is measured for it."""
    loop = Loop(np.full(46, 100.0), policy=Policy(budget_fraction=2.0))
    for i in range(30, 34):
        loop.values[loop.name(i)] = [v * 1.02 for v in loop.values[loop.name(i)]]
    assert {s.why for s in loop.detect().suspects} == {"unconfirmed"}
    after = loop.run()
    assert after.changes == () and after.suspects == ()
    assert loop.sessions == len({q.suspect.commits for p in loop.plans for q in p.requests})  # one look each


def test_a_bracket_confirms_only_where_the_commits_own_medians_lean_its_way():
    """Sessions whose pairs differ by 3 % between c116 and c119 (the bracket of a suspect at c118, two commits
    from the tip) are not enough on a flat series: the commits' own medians around them must lean the same way
    (the two are independent evidence: the confirmation's level is their product)."""
    rng = np.random.default_rng(4)

    def series(step_from: int) -> list[Point]:
        points = []
        for i in range(120):
            own = list(100.0 * (1.03 if i >= step_from else 1.0) * (1 + 0.003 * rng.standard_normal(3)))
            session = list(100.0 * (1.03 if i == 119 else 1.0) * (1 + 0.001 * rng.standard_normal(24)))
            sides = i in (116, 119)
            points.append(Point.of(f"c{i:03d}", own + (session if sides else []), [3, 24] if sides else [3],
                                   [0, 7] if sides else [0]))
        return points

    assert detect(series(200), "cpp", "tsc").changes == ()
    [change] = detect(series(118), "cpp", "tsc").changes
    assert change.confirmed and change.suspect == "c118" and change.candidates == ("c117", "c118", "c119")
    assert 0.025 < change.rel_change < 0.035 and not change.pinned


def _suspect(name: str, commits: tuple[str, ...], p: float = 0.001, why: str = "unconfirmed", looks: int = 0,
             metric: str = "cpp") -> Suspect:
    return Suspect(why, Kind.REGRESSION, metric, "tsc", name, commits, 0.02, p, looks)


def test_a_session_is_the_brackets_two_commits_as_partners_and_the_budget_serves_the_strongest_whole():
    strong, weak = _suspect("c10", ("c08", "c11"), 1e-3), _suspect("c50", ("c48", "c51"), 5e-3)
    # baseline 200 commits x 3 = 600 repetitions, 30 % = 180; 120 spent: 60 left, a session of 24 pairs costs 48
    p = plan([strong, weak], {"c08": 2}, spent=120, baseline_repetitions=600, repetitions_per_round=3)
    assert [(q.commit, q.round, q.partner, q.partner_round, q.repetitions) for q in p.requests] == [
        ("c08", 3, "c11", 1, 24), ("c11", 1, "c08", 3, 24)]
    assert p.exhausted == (weak,) and p.budget == 180
    assert "session 1 of c08 against c11" in p.requests[0].reason
    # another metric's suspect with the same bracket shares the session; a bracket at its looks is exhausted
    pps = _suspect("c10", ("c08", "c11"), 2e-3, metric="pps")
    shared = plan([strong, pps], {}, 0, 600, 3)
    assert len(shared.requests) == 2 and shared.exhausted == ()
    done = _suspect("c10", ("c08", "c11"), looks=Policy().looks)
    assert plan([done], {}, 0, 600, 3).exhausted == (done,)


def test_jobs_under_way_wait_and_rounds_counted_are_never_asked_again():
    s = _suspect("c10", ("c09", "c10", "c11"), why="unpinned")
    waiting = plan([s], {"c10": 1}, 3, 300, 3, waiting={"c10"})
    assert waiting.requests == () and waiting.exhausted == ()  # pending: its round has not arrived
    again = plan([s], {"c09": 1, "c10": 1, "c11": 2}, 9, 300, 3, Policy(max_rounds=2))
    assert [(q.commit, q.round, q.partner) for q in again.requests] == [("c09", 2, None), ("c10", 2, None)]
    with pytest.raises(ValueError):
        plan([s], {}, 0, 300, 0)


def test_no_suspects_on_a_quiet_series_nor_on_deterministic_ones_and_they_can_be_turned_off():
    for seed in range(3, 13):  # a suspect is a CI gate answering "pending": none on noise alone
        rng = np.random.default_rng(seed)
        quiet = [(f"c{i:02d}", list(100 * (1 + 0.01 * rng.standard_normal(REPS)))) for i in range(300)]
        assert detect(quiet, "cpp", "tsc").suspects == ()
    sim = [(f"c{i:02d}", [81.0 if i < 5 else 82.0]) for i in range(10)]
    assert detect(sim, "ipp", "sim").suspects == ()
    loop = Loop(np.where(np.arange(33) >= 30, 103.0, 100.0))
    assert detect(loop.points(), "cpp", "tsc", Settings(max_suspects=0)).suspects == ()


def test_a_plans_requests_run_in_a_random_order_that_favours_neither_side_of_a_change():
    s = _suspect("c10", ("c08", "c09", "c10", "c11", "c12"), why="unpinned")
    requests = plan([s], {}, 0, 300, 3).requests
    assert [q.commit for q in requests] == list(s.commits)  # the plan lists them in series order ...
    orders = [[q.commit for q in run_order(requests, (1, 2, seed))] for seed in range(400)]
    assert all(sorted(o) == sorted(s.commits) for o in orders)  # ... every round measures each once
    assert orders[7] == [q.commit for q in run_order(requests, (1, 2, 7))]  # reproducible from its seed
    before = [np.mean([o.index(c) for c in ("c08", "c09")]) for o in orders]
    after = [np.mean([o.index(c) for c in ("c10", "c11", "c12")]) for o in orders]
    assert abs(np.mean(before) - np.mean(after)) < 0.25  # series order would put them 2.5 positions apart


def test_a_confirmation_spends_its_alpha_over_its_looks():
    settings = Settings()
    assert sum(look_level(k, settings) for k in range(1, settings.confirm_looks + 1)) == pytest.approx(settings.confirm_alpha)
    assert Policy().looks == settings.confirm_looks
    # with the suspects' own level, a level that never moved becomes an alert at most 0.05 x 1e-3 of the time
    assert settings.suspect_alpha * settings.confirm_alpha <= settings.search.alpha
