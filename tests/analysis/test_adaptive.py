"""Suspects and the adaptive re-measurement policy, on simulated series: extra rounds are drawn
from the same noise model as the series, each round one job, or one interleaved session of a
suspect's k - 1 and k sharing the host's state (the detection benchmark's loop, in small)."""

from __future__ import annotations

import numpy as np
import pytest

from perfci_core.analysis import Kind, Point, Settings, Suspect, detect
from perfci_core.analysis.adaptive import Policy, plan, run_order
from perfci_core.analysis.detect import per_look

REPS = 3


class Loop:
    """A series of commits c00, c01, ... at true ``levels``; extra rounds come from the same model."""

    def __init__(self, levels: np.ndarray, first_bias: dict[int, float] | None = None, cv: float = 0.003, seed: int = 0,
                 policy: Policy = Policy(), slow_jobs: float = 0.0, slow_runs: float = 0.0,
                 settings: Settings = Settings(), host_drift: float = 0.0):
        self.rng, self.levels, self.cv, self.policy = np.random.default_rng(seed), levels, cv, policy
        self.settings = settings
        self.slow_jobs = slow_jobs  # share of jobs whose every repetition is 10 % slow (a busy host, docs/design.md "These machines")
        self.slow_runs = slow_runs  # share of runs slowed on their own by 10-60 % (the recorded tsc noise)
        self.host_drift = host_drift  # each session's host is slower or faster by this relative sd (batch drift)
        bias = first_bias or {}
        self.points = {f"c{i:02d}": self.draw(i, bias.get(i, 1.0)) for i in range(len(levels))}
        self.jobs = {c: [REPS] for c in self.points}
        self.pairs = {c: [0] for c in self.points}
        self.sessions = 0
        self.rounds: dict[str, int] = {}
        self.spent = 0
        self.plans = []

    def host(self) -> float:
        return 1.0 + self.host_drift * self.rng.standard_normal() if self.host_drift else 1.0

    def draw(self, i: int, bias: float = 1.0, host: float | None = None) -> list[float]:
        bias *= self.host() if host is None else host
        if self.rng.random() < self.slow_jobs:
            bias *= 1.10
        x = self.levels[i] * bias * (1 + self.cv * self.rng.standard_normal(REPS))
        if self.slow_runs:
            x *= np.where(self.rng.random(REPS) < self.slow_runs, self.rng.uniform(1.1, 1.6, REPS), 1.0)
        return list(x)

    def detect(self):
        return detect([Point.of(c, v, self.jobs[c], self.pairs[c]) for c, v in self.points.items()], "cpp", "tsc",
                      self.settings)

    def run(self, max_loops: int = 10):
        result = self.detect()
        for _ in range(max_loops):
            p = plan(result.suspects, self.rounds, self.spent, REPS * len(self.points), REPS, self.policy)
            self.plans.append(p)
            if not p.requests:
                break
            for q in p.requests:
                if q.partner is None:
                    self.add(q.commit, self.draw(int(q.commit[1:])), 0)
                elif q.commit < q.partner:  # one session for both sides: one host state
                    host, self.sessions = self.host(), self.sessions + 1
                    for c in (q.commit, q.partner):
                        self.add(c, self.draw(int(c[1:]), host=host), self.sessions)
                self.rounds[q.commit] = q.round
                self.spent += REPS
            result = self.detect()
        return result

    def add(self, commit: str, values: list[float], session: int) -> None:
        self.points[commit] += values
        self.jobs[commit].append(REPS)
        self.pairs[commit].append(session)


def test_an_unpinned_change_is_pinned_to_its_commit_by_extra_rounds():
    # 3 repetitions cannot pin a change at the per-commit test's alpha (3 vs 15 runs: p >= 0.0025)
    loop = Loop(np.where(np.arange(40) >= 25, 104.0, 100.0), cv=0.01)
    before = loop.detect()
    [change] = before.changes
    assert change.suspect == "c25" and not change.pinned
    [suspect] = before.suspects
    assert suspect.why == "unpinned" and suspect.kind is Kind.REGRESSION and "c24" in suspect.commits and "c25" in suspect.commits
    after = loop.run()
    [change] = after.changes
    assert change.pinned and change.suspect == "c25" and after.suspects == ()
    assert 0 < loop.spent <= 0.3 * REPS * 40


def test_a_bump_of_one_unlucky_job_per_commit_is_a_suspect_then_rejected():
    # commits 30-33 measured 2 % slow in their first job only (a busy host), the level never moved;
    # a budget that affords two rounds of both suspects' commits (46 commits alone give 41 repetitions)
    loop = Loop(np.full(46, 100.0), first_bias={i: 1.02 for i in range(30, 34)}, policy=Policy(budget_fraction=0.6))
    before = loop.detect()
    assert before.changes == ()  # no alert on it ...
    assert {s.suspect for s in before.suspects} == {"c30", "c34"}  # ... but it is not ignored either
    assert all(s.why == "unconfirmed" for s in before.suspects)
    after = loop.run()
    assert after.changes == () and after.suspects == ()  # rejected: the extra rounds show the old level
    assert loop.rounds and max(loop.rounds.values()) <= Policy().max_rounds


def test_a_step_at_the_tip_is_confirmed_by_the_jobs_of_its_rounds_before_more_commits_come():
    # 15 % of the jobs 10 % slow: 3 commits after a +3 % step sit below the slow jobs among the 197
    # before them, so no test over commits reaches 1e-4; the rounds' jobs, one value each, do
    levels = np.where(np.arange(200) >= 197, 103.0, 100.0)
    for seed in range(3):
        loop = Loop(levels, cv=0.003, seed=seed, slow_jobs=0.15)
        first = loop.detect()
        assert first.changes == () and first.suspects  # (the tip's among them once bursts are settled)
        [change] = loop.run().changes
        assert change.suspect == "c197" and change.pinned and change.kind is Kind.REGRESSION
        assert 0.02 < change.rel_change < 0.04 and change.p_value <= Settings().search.alpha
        assert 1 < max(loop.rounds.values()) <= Policy().max_rounds and loop.spent <= 0.3 * REPS * 200


def test_a_step_at_the_tip_stops_at_the_rounds_per_commit_then_more_commits_confirm_it():
    # one round per commit: too few jobs to confirm, so it waits for the commits pushes bring
    loop = Loop(np.where(np.arange(200) >= 197, 103.0, 100.0), seed=0, slow_jobs=0.15, policy=Policy(max_rounds=1))
    after = loop.run()
    assert after.changes == () and "c197" in [s.suspect for s in after.suspects]
    assert set(loop.rounds.values()) == {1}  # every commit it names had its round ...
    assert loop.plans[-1].requests == () and loop.plans[-1].exhausted == after.suspects  # ... then it stops
    for i in range(200, 230):  # new commits, as pushes bring them
        loop.levels = np.append(loop.levels, 103.0)
        loop.points[f"c{i:02d}"] = loop.draw(i)
        loop.jobs[f"c{i:02d}"], loop.pairs[f"c{i:02d}"] = [REPS], [0]
    [change] = loop.detect().changes
    assert change.suspect == "c197" and change.kind is Kind.REGRESSION


def test_jobs_of_a_level_that_never_moved_confirm_nothing():
    for seed in range(3):
        loop = Loop(np.full(200, 100.0), cv=0.003, seed=10 + seed, slow_jobs=0.15)
        assert loop.run().changes == ()
        loop = Loop(np.full(200, 100.0), cv=0.003, seed=20 + seed, slow_runs=0.25)
        assert loop.run().changes == ()


def test_a_step_the_slowed_runs_hide_in_the_medians_is_found_and_confirmed_from_each_jobs_best_run():
    # A quarter of the runs slowed on their own by 10-60 %: a commit's median of three is slow
    # whenever two are, so three commits after a +3 % step do not stand out in the medians. No run
    # is ever faster than the host allows, so the best of each job shows the step.
    levels = np.where(np.arange(200) >= 197, 103.0, 100.0)
    plain_confirmed = 0
    for seed in range(6):
        loop = Loop(levels, seed=seed, slow_runs=0.25)
        [change] = loop.run().changes
        assert change.suspect == "c197" and change.pinned and change.kind is Kind.REGRESSION
        assert 0.02 < change.rel_change < 0.04 and loop.spent <= 0.3 * REPS * 200  # before any new commit
        plain = Loop(levels, seed=seed, slow_runs=0.25, settings=Settings(best_runs=False))
        plain_confirmed += [c.suspect for c in plain.run().changes] == ["c197"]
    assert plain_confirmed <= 3  # the medians alone confirm half of them at most


def _suspect(name: str, commits: tuple[str, ...], p: float = 0.001) -> Suspect:
    return Suspect("unconfirmed", Kind.REGRESSION, "cpp", "tsc", name, commits, 0.02, p)


def test_the_budget_serves_the_strongest_suspect_whole_and_stops_the_rest():
    strong, weak = _suspect("c10", ("c09", "c10", "c11"), 1e-3), _suspect("c50", ("c49", "c50", "c51"), 5e-3)
    # baseline 100 commits x 3 = 300 repetitions, 30 % = 90; 80 spent: 10 left, one suspect costs 9
    p = plan([strong, weak], {}, spent=80, baseline_repetitions=300, repetitions_per_round=3)
    assert [q.commit for q in p.requests] == ["c09", "c10", "c11"] and all(q.round == 1 for q in p.requests)
    assert p.exhausted == (weak,) and p.budget == 90
    assert "c10" in p.requests[0].reason and "unconfirmed regression +2.00%" in p.requests[0].reason
    spent_all = plan([strong], {}, spent=90, baseline_repetitions=300, repetitions_per_round=3)
    assert spent_all.requests == () and spent_all.exhausted == (strong,)


def test_rounds_under_way_wait_and_rounds_counted_are_never_asked_again():
    s = _suspect("c10", ("c09", "c10", "c11"))
    waiting = plan([s], {"c10": 1}, 3, 300, 3, waiting={"c10"})
    assert waiting.requests == () and waiting.exhausted == ()  # pending: its round has not arrived
    again = plan([s], {"c09": 1, "c10": 1, "c11": 2}, 9, 300, 3, Policy(max_rounds=2))
    assert [(q.commit, q.round) for q in again.requests] == [("c09", 2), ("c10", 2)]
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
    assert detect(list(loop.points.items()), "cpp", "tsc", Settings(max_suspects=0)).suspects == ()


def test_suspects_of_two_metrics_at_the_same_commits_share_one_round():
    cpp = _suspect("c10", ("c09", "c10", "c11"), 1e-3)
    pps = Suspect("unconfirmed", Kind.REGRESSION, "pps", "tsc", "c10", ("c09", "c10", "c11"), -0.02, 2e-3)
    p = plan([cpp, pps], {}, 0, 300, 3)
    assert [q.commit for q in p.requests] == ["c09", "c10", "c11"] and p.exhausted == ()  # one job measures both


def test_a_rounds_jobs_run_in_a_random_order_that_favours_neither_side_of_the_suspect():
    s = _suspect("c10", ("c08", "c09", "c10", "c11", "c12"))
    requests = plan([s], {}, 0, 300, 3).requests
    assert [q.commit for q in requests] == list(s.commits)  # the plan lists them in series order ...
    orders = [[q.commit for q in run_order(requests, (1, 2, seed))] for seed in range(400)]
    assert all(sorted(o) == sorted(s.commits) for o in orders)  # ... every round measures each once
    assert orders[7] == [q.commit for q in run_order(requests, (1, 2, 7))]  # reproducible from its seed
    before = [np.mean([o.index(c) for c in ("c08", "c09")]) for o in orders]
    after = [np.mean([o.index(c) for c in ("c10", "c11", "c12")]) for o in orders]
    assert abs(np.mean(before) - np.mean(after)) < 0.25  # series order would put them 2.5 positions apart
    assert len({tuple(o) for o in orders}) > 100


def test_a_round_measures_the_suspect_and_the_commit_before_it_as_one_interleaved_session():
    s = _suspect("c10", ("c08", "c09", "c10", "c11", "c12"))
    paired = Policy(paired=True)
    p = plan([s], {"c09": 2}, 0, 300, 3, paired)
    pairs = {q.commit: (q.partner, q.partner_round) for q in p.requests}
    assert pairs == {"c08": (None, 0), "c09": ("c10", 1), "c10": ("c09", 3), "c11": (None, 0), "c12": (None, 0)}
    assert [q.round for q in p.requests if q.commit == "c09"] == [3]
    assert all(q.partner is None for q in plan([s], {}, 0, 300, 3).requests)  # the default: separate jobs
    # the commit before it already asked for a stronger suspect: measured with that one's round, unpaired
    both = plan([_suspect("c09", ("c08", "c09"), 1e-4), s], {}, 0, 300, 3, paired)
    assert [(q.commit, q.partner) for q in both.requests if q.suspect is s] == [("c10", None), ("c11", None), ("c12", None)]


def _drifting_rounds(seed: int, rounds: int, paired: bool = True) -> list[Point]:
    """Every job runs on a host 4 % slower or faster (seeded), its repetitions 0.3 % apart: a +3 %
    step three commits from the tip, then ``rounds`` rounds, the suspect and the commit before it
    as one interleaved session (``paired``: known as pairs)."""
    levels = np.where(np.arange(200) >= 197, 103.0, 100.0)
    rng = np.random.default_rng(seed)

    def job(i: int, host: float) -> list[float]:
        return list(levels[i] * host * (1 + 0.003 * rng.standard_normal(REPS)))

    def host() -> float:
        return 1.0 + 0.04 * rng.standard_normal()

    values = {i: [job(i, host())] for i in range(200)}
    sessions = {i: [0] for i in range(200)}
    for r in range(1, rounds + 1):
        shared = host()
        for i in (196, 197):
            values[i].append(job(i, shared))
            sessions[i].append(r)
        for i in (195, 198, 199):
            values[i].append(job(i, host()))
            sessions[i].append(0)
    return [Point.of(f"c{i:03d}", sum(values[i], []), [REPS] * len(values[i]),
                     sessions[i] if paired else [0] * len(sessions[i])) for i in range(200)]


def test_on_a_host_drifting_between_jobs_interleaved_pairs_confirm_and_pin_a_step_separate_jobs_cannot():
    # Separate jobs of the step's commits differ by the host more than by the step; the two sides of
    # an interleaved session share the host, their ratio does not.
    for seed in range(6):
        [change] = detect(_drifting_rounds(seed, 8), "cpp", "tsc").changes
        assert change.suspect == "c197" and change.pinned and change.kind is Kind.REGRESSION
        assert change.by_rounds  # the search over commits has not seen it: the rounds' pairs confirmed it
        assert 0.025 < change.rel_change < 0.035 and change.p_value < 1e-6  # the 24 pairs' signed-rank p
        assert detect(_drifting_rounds(seed, 8, paired=False), "cpp", "tsc").changes == ()  # not known as pairs


def test_the_rounds_pairs_spend_their_alpha_over_the_looks():
    """18 pairs all one way give p = 2 / 2^18 = 7.6e-6: enough for half of 1e-4 (one look at the
    full alpha, the rule before), not for half of 1e-4 / 12 (each of the 12 looks a confirmation
    may take). 24 pairs (8 rounds) reach it."""
    assert per_look(1e-4, Settings()) == pytest.approx(1e-4 / 12)
    for seed in range(3):
        points = _drifting_rounds(seed, 6)
        assert detect(points, "cpp", "tsc").changes == ()
        [change] = detect(points, "cpp", "tsc", Settings(confirm_looks=1)).changes
        assert change.suspect == "c197" and change.p_value == pytest.approx(2 / 2**18)


def test_the_loop_confirms_and_pins_a_step_on_a_drifting_host_from_its_interleaved_rounds():
    levels = np.where(np.arange(200) >= 195, 103.0, 100.0)
    for seed in range(6):
        loop = Loop(levels, seed=seed, host_drift=0.015, policy=Policy(paired=True))
        [change] = loop.run(max_loops=12).changes
        assert change.suspect == "c195" and change.pinned and change.kind is Kind.REGRESSION
        assert loop.spent <= 0.3 * REPS * 200 and loop.sessions >= 1


def test_interleaved_pairs_of_a_level_that_never_moved_confirm_nothing():
    for seed in range(4):
        paired = Policy(paired=True)
        assert Loop(np.full(200, 100.0), seed=30 + seed, host_drift=0.02, policy=paired).run(max_loops=12).changes == ()
        assert Loop(np.full(200, 100.0), seed=40 + seed, slow_runs=0.25, policy=paired).run(max_loops=12).changes == ()


def test_a_confirmation_spends_its_alpha_over_as_many_looks_as_the_policy_gives_rounds():
    assert Settings().confirm_looks == Policy().max_rounds
