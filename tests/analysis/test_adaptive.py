"""Suspects and the adaptive re-measurement policy, on simulated series: extra rounds are drawn
from the same noise model as the series (the detection benchmark's loop, in small)."""

from __future__ import annotations

import numpy as np
import pytest

from perfci_core.analysis import Kind, Settings, Suspect, detect
from perfci_core.analysis.adaptive import Policy, plan

REPS = 3


class Loop:
    """A series of commits c00, c01, ... at true ``levels``; extra rounds come from the same model."""

    def __init__(self, levels: np.ndarray, first_bias: dict[int, float] | None = None, cv: float = 0.003, seed: int = 0,
                 policy: Policy = Policy()):
        self.rng, self.levels, self.cv, self.policy = np.random.default_rng(seed), levels, cv, policy
        bias = first_bias or {}
        self.points = {f"c{i:02d}": self.draw(i, bias.get(i, 1.0)) for i in range(len(levels))}
        self.rounds: dict[str, int] = {}
        self.spent = 0
        self.plans = []

    def draw(self, i: int, bias: float = 1.0) -> list[float]:
        return list(self.levels[i] * bias * (1 + self.cv * self.rng.standard_normal(REPS)))

    def detect(self):
        return detect(list(self.points.items()), "cpp", "tsc")

    def run(self, max_loops: int = 10):
        result = self.detect()
        for _ in range(max_loops):
            p = plan(result.suspects, self.rounds, self.spent, REPS * len(self.points), REPS, self.policy)
            self.plans.append(p)
            if not p.requests:
                break
            for q in p.requests:
                self.points[q.commit] += self.draw(int(q.commit[1:]))
                self.rounds[q.commit] = q.round
                self.spent += REPS
            result = self.detect()
        return result


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
    # commits 30-33 measured 2 % slow in their first job only (a busy host), the level never moved
    loop = Loop(np.full(46, 100.0), first_bias={i: 1.02 for i in range(30, 34)})
    before = loop.detect()
    assert before.changes == ()  # no alert on it ...
    assert {s.suspect for s in before.suspects} == {"c30", "c34"}  # ... but it is not ignored either
    assert all(s.why == "unconfirmed" for s in before.suspects)
    after = loop.run()
    assert after.changes == () and after.suspects == ()  # rejected: the extra rounds show the old level
    assert loop.rounds and max(loop.rounds.values()) <= Policy().max_rounds


def test_a_step_at_the_tip_stops_at_the_rounds_per_commit_then_more_commits_confirm_it():
    # 3 commits after a +3 % step: the rank test over commits cannot reach 1e-4 yet, whatever the repetitions
    loop = Loop(np.where(np.arange(33) >= 30, 103.0, 100.0), policy=Policy(max_rounds=2))  # within the budget
    [suspect] = loop.detect().suspects
    assert suspect.why == "unconfirmed" and suspect.suspect == "c30"
    after = loop.run()
    assert after.changes == () and [s.suspect for s in after.suspects] == ["c30"]
    assert set(loop.rounds.values()) == {2}  # every commit it names had its rounds ...
    assert loop.plans[-1].requests == () and loop.plans[-1].exhausted == after.suspects  # ... then it stops
    for i in range(33, 36):  # new commits, as pushes bring them
        loop.levels = np.append(loop.levels, 103.0)
        loop.points[f"c{i:02d}"] = loop.draw(i)
    [change] = loop.detect().changes
    assert change.suspect == "c30" and change.kind is Kind.REGRESSION


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
    rng = np.random.default_rng(3)
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
