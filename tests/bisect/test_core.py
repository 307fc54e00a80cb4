"""The pure bisection core: search, skip, direction, adaptive repetitions, confirmation, state."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from perfci_core.analysis.bisect import Bisection, Measure, Observation, Outcome, Policy, Sampled, State, paired_samples, run
from perfci_core.analysis.compare import Kind, Verdict

SIM = Policy.for_backend("sim", "ipp")
NOISY = Policy.for_backend("tsc", "cpp")


def levels(n: int, steps: dict[int, float], base: float = 100.0) -> list[float]:
    """A piecewise-constant metric: ``steps`` maps the first commit of a new level to its factor."""
    out, level = [], base
    for i in range(n):
        level *= steps.get(i, 1.0)
        out.append(level)
    return out


class Recorder:
    def __init__(self, values: list[float], unbuildable: set[int] = frozenset(), noise: float = 0.0, seed: int = 0) -> None:
        self.values, self.unbuildable, self.noise = values, unbuildable, noise
        self.rng = np.random.default_rng(seed)
        self.built: list[int] = []
        self.reps = 0

    def __call__(self, index: int, count: int, fresh: bool) -> list[float] | None:
        if index not in self.built:
            self.built.append(index)
        if index in self.unbuildable:
            return None
        self.reps += count
        return list(self.values[index] * (1 + self.noise * self.rng.standard_normal(count)))


def test_sim_finds_the_regression_past_an_improvement_and_an_unbuildable_commit():
    values = levels(16, {4: 0.98, 11: 1.03})  # an improvement at 4, the regression at 11
    rec = Recorder(values, unbuildable={7})
    outcome = run(Bisection(16, SIM), rec)
    assert outcome.status == "culprit" and (outcome.parent, outcome.culprit) == (10, 11)
    assert outcome.kind is Kind.REGRESSION
    assert math.isclose(outcome.step.rel_change, 0.03)
    assert 7 in rec.built  # the middle was tried, failed to build, and was skipped
    assert outcome.overall.before_median == values[0] and outcome.overall.after_median == values[-1]


@pytest.mark.parametrize("n", [8, 16, 32, 100])
def test_sim_builds_at_most_log2_plus_two(n):
    for culprit in range(1, n):
        rec = Recorder(levels(n, {culprit: 1.01}))
        outcome = run(Bisection(n, SIM), rec)
        assert outcome.found and outcome.culprit == culprit
        assert len(rec.built) <= math.ceil(math.log2(n)) + 2, (culprit, rec.built)


def test_an_improvement_is_bisected_as_an_improvement():
    outcome = run(Bisection(10, SIM), Recorder(levels(10, {6: 0.95})))
    assert outcome.found and outcome.culprit == 6 and outcome.kind is Kind.IMPROVEMENT


def test_no_change_and_unbuildable_endpoints():
    same = run(Bisection(9, SIM), Recorder([50.0] * 9))
    assert same.status == "no_change" and same.culprit is None
    broken = run(Bisection(9, SIM), Recorder(levels(9, {3: 1.1}), unbuildable={0}))
    assert broken.status == "inconclusive" and "good commit does not build" in broken.message


def test_only_unbuildable_commits_left_is_ambiguous():
    outcome = run(Bisection(8, SIM), Recorder(levels(8, {5: 1.05}), unbuildable={4}))
    assert outcome.status == "ambiguous" and outcome.culprit == 5 and outcome.skipped == (4,)


def test_noisy_three_percent_step_under_one_percent_noise():
    correct, reps = 0, []
    for seed in range(40):
        rng = np.random.default_rng(seed)
        culprit = int(rng.integers(1, 64))
        rec = Recorder(levels(64, {culprit: 1.03}), noise=0.01, seed=seed)
        outcome = run(Bisection(64, NOISY), rec)
        correct += outcome.found and outcome.culprit == culprit
        reps.append(rec.reps)
    assert correct >= 38, correct
    assert max(reps) > min(reps)  # repetitions adapt to how hard each step is


def test_noise_without_a_step_is_no_change_or_inconclusive_never_a_culprit():
    for seed in range(10):
        outcome = run(Bisection(16, NOISY), Recorder([10.0] * 16, noise=0.01, seed=seed))
        assert outcome.status in ("no_change", "inconclusive"), outcome


def test_repetitions_are_capped():
    policy = Policy.for_backend("tsc", "cpp", max_reps=10)
    b = Bisection(16, policy)
    run(b, Recorder(levels(16, {8: 1.02}), noise=0.03, seed=3))  # more than 10 repetitions would need
    counts = [len(o.samples) for o in (*b.obs.values(), *b.fresh.values())]
    assert max(counts) == 10 and all(c <= 10 for c in counts)


def test_state_round_trips_through_json_mid_search():
    """The server stores the state between results; resuming gives the same answer."""
    values = levels(32, {19: 1.02})
    b = Bisection(32, SIM)
    for _ in range(3):  # three measurement rounds, then "persist"
        step = b.next()
        for index, reps in step.wants:
            b.record(index, [values[index]] * reps)
    state = State.from_dict(json.loads(json.dumps(b.state.to_dict())))
    resumed = Bisection(32, SIM, state, {i: Observation(list(o.samples)) for i, o in b.obs.items()})
    outcome = run(resumed, lambda i, k, fresh: [values[i]] * k)
    assert outcome.found and outcome.culprit == 19


def test_without_remeasure_the_confirmation_reuses_the_search_samples():
    policy = Policy.for_backend("sim", "ipp", remeasure=False)
    values = levels(12, {9: 1.01})
    b = Bisection(12, policy)
    outcome = run(b, lambda i, k, fresh: [values[i]] * k)
    assert outcome.found and not b.fresh


def test_exhausted_commits_stop_asking_for_repetitions():
    b = Bisection(4, NOISY)
    b.record(0, [1.0, 1.01, 0.99], exhausted=True)
    b.record(3, [1.0, 1.02, 0.98], exhausted=True)
    step = b.next()
    assert isinstance(step, Outcome) and step.status == "inconclusive"


def test_bad_policy_and_range():
    with pytest.raises(ValueError):
        Policy.for_backend("tsc", "cpp", initial_reps=0)
    with pytest.raises(ValueError):
        Bisection(1, SIM)


# --- moves against the hunted kind ---------------------------------------------------------------

# c1..c6: a +1.6 % regression at c3 (index 2), a bigger -6.4 % improvement at c5 (index 4); overall
# the range looks better, so following the endpoints alone walks past the regression.
OPPOSED = levels(6, {2: 1.016, 4: 0.936})
HUNTED_AND_OPPOSING = {"any": (4, "improvement", 2), "improvement": (4, "improvement", 2), "regression": (2, "regression", 4)}


@pytest.mark.parametrize("direction", ["any", "regression", "improvement"])
@pytest.mark.parametrize("backend, metric, noise", [("sim", "ipp", 0.0), ("tsc", "cpp", 0.003)])
def test_both_culprits_of_an_opposed_range_are_isolated(direction, backend, metric, noise):
    culprit, kind, opposing = HUNTED_AND_OPPOSING[direction]
    for seed in range(5 if noise else 1):
        outcome = run(Bisection(6, Policy.for_backend(backend, metric, direction=direction)),
                      Recorder(OPPOSED, noise=noise, seed=seed))
        assert outcome.found and outcome.culprit == culprit and outcome.kind.value == kind, (seed, outcome)
        assert outcome.direction == direction
        [move] = outcome.opposing_moves
        assert move["kind"] != kind and move["status"] == "culprit" and move["culprit"] == opposing, move
        assert move["parent"] == opposing - 1 and move["good"] < opposing <= move["bad"]
        assert outcome.opposing_isolated
        assert any(f"isolated at commit {opposing}" in n for n in outcome.notes), outcome.notes
        if backend == "sim":
            assert move["change"]["change_pct"] == pytest.approx(1.6 if kind == "improvement" else -6.4)


def test_hunting_a_regression_inside_an_overall_improvement_scans_the_range():
    b = Bisection(6, Policy.for_backend("sim", "ipp", direction="regression"))
    outcome = run(b, Recorder(OPPOSED))
    assert outcome.overall.kind is Kind.IMPROVEMENT  # the endpoints alone would have fixed the wrong kind
    assert any("scanning the range for a regression" in n for n in outcome.notes)
    assert [s["phase"] for s in b.state.steps][:2] == ["endpoints", "scan"]


def test_no_hunted_kind_in_the_range_is_no_change_but_the_other_move_is_reported():
    values = levels(12, {7: 0.95})
    rec = Recorder(values)
    outcome = run(Bisection(12, Policy.for_backend("sim", "ipp", direction="regression")), rec)
    assert outcome.status == "no_change" and outcome.culprit is None and "no regression" in outcome.message
    [move] = outcome.opposing_moves
    assert (move["kind"], move["culprit"], move["isolated"]) == ("improvement", 7, True)
    assert len(rec.built) <= math.ceil(math.log2(12)) + 2  # the scan narrowed it; the search only confirmed


def test_moves_that_cancel_at_the_endpoints_are_both_found_when_a_kind_is_hunted():
    values = levels(10, {3: 1.03, 7: 1 / 1.03})
    assert run(Bisection(10, SIM), Recorder(values)).status == "no_change"  # "any": nothing to follow
    outcome = run(Bisection(10, Policy.for_backend("sim", "ipp", direction="regression")), Recorder(values))
    assert outcome.found and outcome.culprit == 3
    assert [(m["kind"], m["culprit"]) for m in outcome.opposing_moves] == [("improvement", 7)]


def test_an_opposing_move_that_cannot_be_isolated_is_named_by_its_range():
    values = levels(8, {2: 1.016, 6: 0.936})
    outcome = run(Bisection(8, SIM), Recorder(values, unbuildable={1}))
    assert outcome.found and outcome.culprit == 6 and outcome.kind is Kind.IMPROVEMENT
    [move] = outcome.opposing_moves
    assert move["kind"] == "regression" and move["status"] == "ambiguous" and not move["isolated"]
    assert not outcome.opposing_isolated
    assert any(f"between commits {move['good']} and {move['bad']}: not isolated" in n for n in outcome.notes)

    kept = run(Bisection(8, Policy.for_backend("sim", "ipp", isolate_opposing=False)), Recorder(values))
    [move] = kept.opposing_moves
    assert "status" not in move and not move["isolated"] and not kept.opposing_isolated
    assert any("not isolated" in n for n in kept.notes)


def test_a_chance_opposing_verdict_not_seen_again_is_dismissed():
    """5 vs 5 repetitions reach p = 0.008 when all of one side happen to lie above the other; the
    isolation's fresh repetitions do not see it again, and it does not count as a move."""
    b = Bisection(6, Policy.for_backend("tsc", "cpp", direction="regression"))
    b.state.hunted, b.state.kind = "regression", "regression"
    flat = [100.0, 100.1, 99.9, 100.05, 99.95]
    for i in range(6):
        b.record(i, flat if i < 5 else [x + 0.4 for x in flat])  # 4 -> 5 looks like +0.4 %, an opposing "move"
    b.state.phase, b.state.lo, b.state.hi = "confirm", 0, 1
    b.state.opposing = [{"good": 4, "bad": 5, "kind": "improvement", "change_pct": -0.4, "p_value": 0.008,
                         "exact": False, "seen": "search"}]
    rec = Recorder([100.0] * 6, noise=0.001, seed=1)
    outcome = run(b, rec)
    [move] = outcome.opposing
    assert move["status"] == "unconfirmed" and move["dismissed"] and not outcome.opposing_moves
    assert any("not counted" in n for n in outcome.notes)


def test_state_round_trips_while_an_opposing_move_is_isolated():
    values = OPPOSED
    b = Bisection(6, Policy.for_backend("sim", "ipp", direction="regression"))
    while b.state.stage != "opposing":
        step = b.next()
        for index, reps in step.wants:
            b.record(index, [values[index]] * (reps - b.count(index, step.fresh)), fresh=step.fresh)
    state = State.from_dict(json.loads(json.dumps(b.state.to_dict())))
    assert state.stage == "opposing" and state.first["culprit"] == 2
    resumed = Bisection(6, Policy.for_backend("sim", "ipp", direction="regression"), state,
                        {i: Observation(list(o.samples)) for i, o in b.obs.items()})
    outcome = run(resumed, lambda i, k, fresh: [values[i]] * k)
    assert outcome.culprit == 2 and [m["culprit"] for m in outcome.opposing_moves] == [4]
    with pytest.raises(ValueError, match="hunts 'regression'"):
        Bisection(6, SIM, state)


def test_direction_needs_a_known_metric_and_a_known_word():
    with pytest.raises(ValueError, match="direction must be"):
        Policy.for_backend("sim", "ipp", direction="worse")
    with pytest.raises(ValueError, match="better direction"):
        Policy.for_backend("sim", None, direction="regression")


class DriftingHost:
    """A host whose speed moves between jobs by ``drift`` (a loaded machine's batch drift), with
    ``noise`` within a job. ``interleave``: a step that wants two commits measures them in one
    session, A B A B (the order inside each pair drawn at random), each pair sharing the host's
    state, at least ``min_pairs`` pairs; otherwise every commit is its own job."""

    def __init__(self, values: list[float], seed: int, interleave: bool, drift: float = 0.04,
                 noise: float = 0.005, min_pairs: int = NOISY.pairs_needed()) -> None:
        self.values, self.interleave, self.drift, self.noise, self.min_pairs = values, interleave, drift, noise, min_pairs
        self.rng = np.random.default_rng(seed)
        self.step: Measure | None = None
        self.waiting: dict[tuple[int, bool], Sampled] = {}
        self.sessions = 0

    def on_step(self, step: Measure) -> None:
        self.step = step

    def job(self, index: int, count: int) -> np.ndarray:
        return self.values[index] * (1 + self.drift * self.rng.standard_normal()) * (1 + self.noise * self.rng.standard_normal(count))

    def __call__(self, index: int, count: int, fresh: bool) -> list[float] | Sampled:
        if (index, fresh) in self.waiting:
            return self.waiting.pop((index, fresh))
        step = self.step
        if not self.interleave or len(step.wants) != 2:
            return list(self.job(index, count))
        (i, _), (j, _) = step.wants
        pairs = max(count, self.min_pairs)
        host = 1 + self.drift * self.rng.standard_normal(pairs)  # the host's state at each pair
        a, b = (self.values[k] * host * (1 + self.noise * self.rng.standard_normal(pairs)) for k in (i, j))
        self.sessions += 1
        self.waiting[(j if index == i else i, fresh)] = Sampled(list(b if index == i else a), self.sessions)
        return Sampled(list(a if index == i else b), self.sessions)


def test_interleaved_endpoints_on_a_drifting_host_do_not_invent_a_culprit():
    """An unchanged range on a host drifting 4 % between jobs: measured as separate jobs, the
    endpoints differ by the drift and the search hunts a culprit; measured interleaved, the
    endpoints are decided on their pairs, which share the host's state, and are the same."""
    separate, interleaved = [], []
    for seed in range(20):
        for arm, out in ((False, separate), (True, interleaved)):
            host = DriftingHost([100.0] * 16, seed, interleave=arm)
            outcome = run(Bisection(16, NOISY), host, on_step=host.on_step)
            out.append(outcome)
    assert not any(o.found for o in interleaved), [o.message for o in interleaved]
    # (a session whose pairs lost one to the burst rule is below the 8 that can reach alpha: all samples decide)
    assert sum(o.overall.paired for o in interleaved) >= 15, [o.overall for o in interleaved]
    # separate jobs: the drift makes the endpoints differ and the search names a commit for a change that is not
    # there (with alpha spent over the looks, its confirmation mostly rejects that commit: "unconfirmed")
    assert sum(o.status in ("culprit", "unconfirmed", "ambiguous") for o in separate) >= 5, [o.status for o in separate]
    assert not any(o.overall.paired for o in separate)


def test_a_step_found_on_interleaved_pairs_is_confirmed_on_pairs():
    values = levels(16, {9: 1.03})
    host = DriftingHost(values, 3, interleave=True, drift=0.0)
    outcome = run(Bisection(16, NOISY), host, on_step=host.on_step)
    assert outcome.found and outcome.culprit == 9, outcome.message
    assert outcome.overall.paired and outcome.step.paired and outcome.step.n_before >= 8


def test_pairs_decide_only_when_they_can_reach_alpha():
    """Pairs decide only when they can reach their look's share of alpha = 0.01: not five (the
    signed-rank test's smallest p is 2 / 2^5) nor eight (2 / 2^8 = 0.0078, above the second look's
    0.0016), eleven (2 / 2^11, the third look's 0.0014) can. Without spending eight can."""
    assert NOISY.pairs_needed() == 14 and replace(NOISY, spending=None).pairs_needed() == 10
    b = Bisection(4, NOISY)
    for pairs, paired in ((5, False), (8, False), (11, True)):
        before = Observation([100.0 + 0.1 * k for k in range(pairs)], sessions=[1] * pairs)
        after = Observation([103.0 + 0.1 * k for k in range(pairs)], sessions=[1] * pairs)
        assert b._compare(before, after, 0.01).paired is paired


def test_a_runner_that_measures_each_commit_once_decides_at_the_whole_alpha():
    """The server measures each commit once (one job of the config's repetitions). Spending alpha over looks that
    never come leaves 5 against 5 below the first look's share (0.0020 < 2 / 252), so a clear step was undecided;
    measured once, each comparison is its one look at the whole alpha, and an interleaved session needs 8 pairs
    (and takes 10: room for a burst)."""
    once = Policy.measured_once("tsc", "cpp", 5)
    assert once.look_alpha(5) == pytest.approx(once.alpha) and once.look_alpha(8) == pytest.approx(once.alpha)
    assert once.pairs_needed() == 10 and not once.remeasure
    assert Policy.measured_once("sim", "ipp", 1) == Policy.for_backend("sim", "ipp", remeasure=False)
    rng = np.random.default_rng(1)
    good, bad = 100.0 * (1 + 0.01 * rng.standard_normal(5)), 110.0 * (1 + 0.01 * rng.standard_normal(5))
    for policy, verdict in ((once, Verdict.DIFFERENT), (replace(NOISY, remeasure=False), Verdict.UNKNOWN)):
        b = Bisection(2, policy)
        c = b._compare(Observation(list(good), exhausted=True), Observation(list(bad), exhausted=True), 0.01)
        assert c.verdict is verdict, (policy, c)


def test_samples_pair_up_within_their_sessions_only():
    a = Observation([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], sessions=[0, 1, 1, 2, 2, 4])
    b = Observation([10.0, 20.0, 30.0, 40.0, 50.0, 60.0], sessions=[1, 1, 2, 3, 0, 4])
    before, after = paired_samples(a, b)
    # session 2 lost a repetition on one side: its order no longer matches, so it is left out
    assert list(before) == [2.0, 3.0, 6.0] and list(after) == [10.0, 20.0, 60.0]
    with pytest.raises(ValueError, match="session keys"):
        Observation([1.0, 2.0], sessions=[1])


def test_each_look_of_a_comparison_tests_at_its_share_of_alpha():
    """While UNKNOWN a comparison adds 5 repetitions and looks again, up to 40 (8 looks): the looks' levels sum to
    alpha (before, each look was at the full alpha, and a flat range's endpoints were called DIFFERENT up to 2.7x as
    often as alpha). A complete separation at 5 vs 5 (p = 2 / 252) no longer decides; at 10 vs 10 it does."""
    assert NOISY.looks == 8
    levels_ = [NOISY.look_alpha(n) for n in range(5, 41, 5)]
    assert math.isclose(sum(levels_), NOISY.alpha) and len(set(levels_)) == 8
    assert NOISY.look_alpha(7) == NOISY.look_alpha(10)  # a look between the steps counts as the next one
    b, old = Bisection(4, NOISY), Bisection(4, replace(NOISY, spending=None))
    for n, verdict in ((5, Verdict.UNKNOWN), (10, Verdict.DIFFERENT)):
        lo, hi = Observation([100.0 + 0.1 * k for k in range(n)]), Observation([103.0 + 0.1 * k for k in range(n)])
        assert b._compare(lo, hi, 0.01).verdict is verdict
        assert old._compare(lo, hi, 0.01).verdict is Verdict.DIFFERENT


def test_spending_must_be_a_known_shape():
    with pytest.raises(ValueError, match="spending"):
        replace(NOISY, spending="linear")
