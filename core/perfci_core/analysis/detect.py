"""Detection: regressions and improvements of one series, each located at a commit range.

:func:`detect` combines the two checks docs/design.md ("Deciding a regression") asks for:

1. change points over the commit order (:mod:`.changepoints`: MDL grouping of the per-commit
   medians, every boundary validated by a two-sample test on up to ``window`` commits each side
   with the learned minimum effect) — the segment-level evidence, which is what raises an alert;
2. a per-commit two-sample test on the *repetitions* at each boundary (:func:`compare.compare`)
   — the commit-level evidence, which pins the change to one commit when the repetitions can:
   the suspect commit differs from the repetitions just before it, and the commit before it
   differs from the repetitions just after. Otherwise the change is reported as the commit range
   the change-point search cannot tell apart (last good .. first bad), for ``perfci bisect``.

Deterministic (``sim``) series use the exact-change rule between consecutive commits instead
(no statistics, one repetition suffices, always pinned).

No alert floods, no missed regressions: an alert needs a whole new level (at least
``min_segment`` commits) that passes a rank test at ``alpha`` = 1e-4 (``SearchSettings.alpha``) against its
neighbour level and moves by at least the learned minimum effect; one outlier commit, a bimodal build or
slow drift does not. What it costs is delay: a noisy change is reported once ``min_segment``
commits confirm it.

Bad input: non-finite repetitions and empty points are dropped with a note
(:func:`series.clean`); fewer than two points give no verdict (a note); an unknown metric raises
KeyError naming the known ones unless ``Settings.unknown_metric == "report"``, which reports
changes of kind CHANGE (no better-direction known, so neither regression nor improvement).

Suspects (noisy backends only, :class:`Suspect`): places where a change is likely but the
statistics can neither confirm nor reject it yet, so that more repetitions there
(:mod:`.adaptive`) can decide. Two kinds, both bounded so they cannot flood:

- ``unconfirmed``: a boundary of the suspects' own search (the MDL grouping of the newest
  ``Settings.suspect_tail`` commits at half the penalty, ``Settings.suspect_penalty``, so a step
  shows after its first few commits) whose validation test passes at the looser
  ``Settings.suspect_alpha`` (0.05) instead of the search's alpha (1e-4), with a move of at least
  the learned minimum effect, and that no confirmed change already covers. A step the data leans
  towards but far from the evidence an alert needs: worth a few more repetitions, never an
  alert. The minimum segment and the minimum effect still apply, so a lone outlier commit or slow
  drift is no more a suspect than it is a change.
- ``unpinned``: a confirmed change whose location is a range of commits (the repetitions could
  not pin it): more repetitions of the commits around it locate it.

At most ``Settings.max_suspects`` per series, the strongest (lowest p) first; each names the
commits whose extra repetitions decide it (at least two before the suspect and two from it on,
plus an unpinned change's candidates), at most ``Settings.suspect_commits`` of them.

Confirmation by the rounds' jobs. The test over commits needs many commits after a step when the
host is noisy (a quarter of the recorded ``tsc`` runs on these machines are 10-75 % slow, in most
jobs: benchmarks/detection/data/README.md): a slow commit median on either side costs it ranks,
and extra repetitions of a commit only make its one median more precise. The repetitions of one
job share the host's moment; separate jobs do not. So an unconfirmed boundary is also tested with **one value per job** (the median of each
job's repetitions, :meth:`series.CleanSeries.run_medians`) of the commits it names, before it
against from it on — the same two-sample test, at the search's alpha spent over the rounds (levels,
below) and the minimum effect. When
the extra rounds give that test enough jobs to pass, in the boundary's direction, and the
repetitions pin it to its commit, it is a change like any other (its ``p_value`` that test's).
Without rounds every commit is one job and a suspect's few commits cannot reach 1e-4 (at most 3
against 4 commits: p >= 0.057), so this path is only open to the rounds. The rounds of a suspect's commits
are measured in the same stretch of time, which is what keeps the two sides comparable.

The best run of each job. On a shared host interference only ever makes a run worse: about a
quarter of the recorded ``tsc`` runs are 10-75 % slow, none is fast. A commit's median of three
runs is slow whenever two are, which hides a 2-3 % step for a dozen commits; the best run of a
job (the lowest when lower is better) is the value the interference touches least — the minimum
estimator of robust benchmarking (Chen and Revels 2016, BenchmarkTools.jl). So, when the metric's
better direction is known and ``Settings.best_runs`` is on:

- the suspects' search runs a second time over the newest ``Settings.best_tail`` commits on each
  commit's median of its jobs' best runs (:meth:`series.CleanSeries.bests`), at the same penalty
  and loose alpha;
- the rounds' test above is made on the jobs' medians and on the jobs' best runs, each at half
  the alpha (Bonferroni: one confirmation, two looks).

Both are rank tests over exchangeable jobs, so whichever value a job contributes, a level that
never moved passes them at most ``alpha`` of the time; what the best run changes is power. The
alert itself still needs the repetitions to pin it (:func:`_pin`), and the test over commits
(which raises alerts without rounds) keeps the medians: the main detection is unchanged. On
recorded ``tsc`` noise, 12 jobs against 18 across a +3 % step pass the test 81 % of the time on
their best runs and 27 % on their medians (``benchmarks/detection/job_values.py``).

Interleaved rounds. A round of the suspect ``k`` measures ``k - 1`` and ``k`` interleaved, A B A B
in one session (:mod:`.adaptive`, the agent's ``interleave``): the two runs of a pair share the
host's moment, so a host that drifts between jobs moves both and cancels in their ratio, which no
test over separate jobs can do. When a boundary at ``k`` has such pairs
(:meth:`series.CleanSeries.paired`), they get their own test: the signed-rank test of
:func:`.paired.paired_compare` on every pair so far, at ``Settings.paired_share`` of the alpha
(the jobs' tests share the rest: Bonferroni over the looks actually taken), with the learned
minimum effect. Until there are enough pairs to reach that share at all (19 at half of 1e-4 / 12,
bursts left out: :func:`.paired.can_reject`), the pairs' test cannot pass and the jobs' tests
keep the whole alpha. It compares ``k`` with ``k - 1`` directly, so when it passes, in the boundary's
direction, the change is confirmed *and* pinned at ``k``; it also pins a confirmed change the
repetitions could not pin (at ``paired_share`` of the pinning alpha). Pairs are evidence of their
own: when drifting jobs have taken the boundary out of the suspects' search, pairs that pass
confirm the change at ``k`` all the same, and pairs that lean as a suspect must (``suspect_alpha``,
or all one way while there are too few of them to reach it: 2 / 2^n > 0.05 below six pairs) by at
least the minimum effect keep it a suspect (more rounds); other pairs let it go.

Levels. Every round adds evidence and detection tests again, so a confirmation takes up to
``Settings.confirm_looks`` looks (12: ``adaptive.Policy.max_rounds``). Each look of the rounds'
tests (jobs and pairs, and the pairs' pin) runs at ``alpha / confirm_looks`` (:func:`per_look`,
Bonferroni over the looks), so a suspect that never moved is confirmed by its rounds at most
``alpha`` of the time over all of them, not ``alpha`` per round. The figures,
``benchmarks/detection/null_levels.py``, run the rounds at a large alpha where the rate can be
counted. They also count the search over commits: by default it sees every repetition, the rounds' too, so
after rounds it may select a boundary on their repetitions and validate it on the same data, which no spending
covers. ``Settings.search_own_jobs`` makes it select and validate on each commit's own (first) job only
(:meth:`series.CleanSeries.first_jobs`; the suspects' search still sees every repetition, so rounds can take a
suspect away): the loop then holds its level, but on the drift benchmark the rounds' tests confirm none of the
steps the search found after rounds, so it is off (docs/detection.md). What ``Change.confidence`` is: ``1 - p`` of the boundary's own test, on data that chose the
boundary; it orders changes by strength but is not the probability that the change is real.

Incremental. The server detects a series after every upload over a window of its newest commits,
and the main search is most of what that costs. Two rules make most of it reusable from one
detection to the next without changing a verdict:

- a window starts at a multiple of ``Settings.block`` positions (:func:`window_start`), so its
  start moves a block at a time, not a commit at a time;
- the main search's noise, typical repetition count and penalty (:class:`.changepoints.Frame`)
  are learned on the points before the newest block (once the series has at least four blocks
  of them), so they stay the same while a block fills.

Between two block edges a series' main search then differs from the last one only at its newest
points and where commits were re-measured; a :class:`.changepoints.SearchMemo` passed to
:func:`detect` searches on from the longest prefix whose inputs are unchanged (exactly what a
search from scratch proposes: it compares the inputs themselves). The learned minimum effect and
every test still use the whole series.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field, replace
from typing import Iterable, Literal, Sequence

import numpy as np

from perfci_core import metrics as catalogue

from .changepoints import ChangePoint, Frame, Proposal, SearchMemo, SearchSettings, find_exact_changes
from .compare import DEFAULT_TOLERANCE, Comparison, Kind, Verdict, compare
from .noise import diff_sigma, learned_min_effect
from .paired import can_reject, min_attainable_p, paired_compare
from .sequential import look_alpha
from .series import CleanSeries, Point, clean, resolve_metric, to_scale

NOISE_FLOOR = 1e-6  # relative; a noisy-backend series that never moved still gets a finite scale


@dataclass(frozen=True)
class Settings:
    tolerance: float = DEFAULT_TOLERANCE  # sim: relative change that counts as a change
    min_change: float = 0.002  # floor of the minimum effect (0.2 %)
    noise_factor: float = 0.5  # minimum effect = max(min_change, noise_factor x per-commit noise)
    search: SearchSettings = field(default_factory=SearchSettings)
    pin_commits: int = 5  # commits of repetitions pooled on each side for the per-commit test
    commit_alpha: float = 1e-4  # the per-commit test's alpha (pinning must not guess)
    unknown_metric: Literal["raise", "report"] = "raise"
    tail_window: int = 300  # IncrementalDetector: points re-examined on each append
    suspect_alpha: float = 0.05  # a boundary with p at most this (but above search.alpha) is a suspect
    max_suspects: int = 3  # per series, strongest first (no flood)
    suspect_commits: int = 7  # commits re-measured per suspect, centred on it
    # The suspects' own MDL search (module doc). At the full penalty a 2 % step in the real-noise
    # benchmark family is often proposed only 8-13 commits on. On the benchmark's tuning seeds 11-20
    # (real family, delay of each step) the median is 5 commits at 0.5 and 3 at 0.25, but at 0.25
    # 8 of 10 quiet series (1 % Gaussian noise, 300 commits) hold a pending suspect — a CI gate
    # answering "pending" for nothing — where 0.5 gives none.
    suspect_penalty: float = 0.5
    suspect_tail: int = 50  # ... over the newest commits only (older steps: the full search has had its commits)
    # Suspects are also searched, and rounds also tested, on each job's best repetition (module doc),
    # that search over the newest best_tail commits only: it is there to see a step in its first few
    # commits. Tuning seeds 11-20 (real family): tails of 8 / 15 / 25 / 50 gave a median delay of
    # 3.1 / 3.0 / 3.4 / 3.5 commits at 9.1 / 10.5 / 10.6 / 11.5 suspects per 1000 commits away from
    # any step, and 13.1 / 13.8 / 14.9 / 16.0 % extra repetitions; 15 also stays clear of the tip
    # when a backlog of uploads is detected at once.
    best_runs: bool = True
    best_tail: int = 15
    # The share of a confirmation's (and of a pin's) alpha given to the interleaved pairs' test when a
    # boundary has pairs (module doc); the jobs' tests share the rest.
    paired_share: float = 0.5
    # The looks a confirmation by rounds may take: the extra rounds a suspect's commits may get
    # (adaptive.Policy.max_rounds). Each look tests at alpha / confirm_looks (module doc: levels).
    confirm_looks: int = 12
    # The search over commits selects and validates on each commit's own (first) job only, so the rounds'
    # repetitions serve only the suspects' search, the rounds' tests and pinning (module doc: levels). Off: on
    # the drift benchmark it gives up every step the rounds found (2-3 %: 10/24 against 22/24, docs/detection.md).
    search_own_jobs: bool = False
    # Windows start at a multiple of this many positions, and the main search learns its frame on
    # the points before the newest block (module doc: incremental). 25: a 200-commit window keeps
    # 176-200 commits, and its search is redone from scratch once every 25 commits.
    block: int = 25


@dataclass(frozen=True)
class Change:
    kind: Kind  # REGRESSION / IMPROVEMENT (CHANGE for a metric of unknown direction)
    metric: str
    backend: str
    index: int  # position of the suspect commit in the series as passed in (dropped points counted)
    suspect: str  # most likely first bad commit
    last_good: str  # last commit known to be at the old level
    first_bad: str  # first commit known to be at the new level
    candidates: tuple[str, ...]  # commits that may be the first bad one (last_good excluded)
    pinned: bool  # the repetitions pin the change to `suspect`
    before_median: float
    after_median: float
    rel_change: float
    p_value: float
    confidence: float  # 1 - p_value: a strength to sort by, not a probability the change is real (module doc: levels)
    min_effect: float
    exact: bool  # decided by the exact-change rule (sim)
    commit_check: Comparison | None = None  # suspect's repetitions vs the ones just before
    by_rounds: bool = False  # confirmed by the rounds' tests (jobs or pairs), not by the search over commits

    @property
    def percent(self) -> float:
        return 100.0 * self.rel_change


@dataclass(frozen=True)
class Suspect:
    """A likely change the statistics cannot decide yet (see the module doc)."""

    why: Literal["unconfirmed", "unpinned"]
    kind: Kind  # direction the data leans to (CHANGE for a metric of unknown direction)
    metric: str
    backend: str
    suspect: str  # most likely first commit at the new level
    commits: tuple[str, ...]  # commits whose extra repetitions decide it, in series order
    rel_change: float
    p_value: float

    @property
    def percent(self) -> float:
        return 100.0 * self.rel_change


@dataclass(frozen=True)
class DetectionResult:
    metric: str
    backend: str
    changes: tuple[Change, ...]
    n_points: int
    noise: float  # relative commit-to-commit noise of the per-commit medians (0 for sim)
    min_effect: float
    notes: tuple[str, ...] = ()
    suspects: tuple[Suspect, ...] = ()

    @property
    def regressions(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.kind is Kind.REGRESSION)

    @property
    def improvements(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.kind is Kind.IMPROVEMENT)


def _metric(metric: str | catalogue.Metric, settings: Settings, notes: list[str]) -> tuple[str, catalogue.Metric | None]:
    if isinstance(metric, catalogue.Metric):
        return metric.name, metric
    try:
        return metric, resolve_metric(metric)
    except KeyError:
        if settings.unknown_metric == "report":
            notes.append(f"unknown metric {metric!r}: changes reported without a better-direction")
            return metric, None
        raise


def series_noise(s: CleanSeries, learn: slice = slice(None), counts: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """Relative per-commit-median noise of a series and each point's noise on the search scale,
    both learned on the points ``learn`` (default: all).

    A point with fewer repetitions than is typical for the series is noisier: its sigma is
    scaled by sqrt(typical count / its count). ``counts``: the points' repetition counts to
    scale for instead of the series' own (medians of more repetitions than were learned on).
    """
    scaled = to_scale(s.medians)
    sigma = max(diff_sigma(scaled[learn]), NOISE_FLOOR)
    typical = float(np.median(s.counts[learn]))
    return sigma, sigma * np.sqrt(typical / (s.counts if counts is None else counts))


def window_start(position: int, block: int) -> int:
    """First position of a window that may start at ``position`` at the earliest: the next
    multiple of ``block`` (module doc: incremental)."""
    return -(-position // block) * block if block > 0 else position


def learned_part(positions: Sequence[int], block: int) -> int:
    """How many leading points the main search learns its frame on: those before the newest
    block, or every point while fewer than four blocks of them are there."""
    if block <= 0 or not positions:
        return len(positions)
    stop = bisect_left(positions, positions[-1] // block * block)
    return stop if stop >= 4 * block else len(positions)


def detect(
    series: CleanSeries | Sequence[Point | tuple[str, float | Iterable[float]]],
    metric: str | catalogue.Metric,
    backend: catalogue.Backend | str,
    settings: Settings = Settings(),
    memo: SearchMemo | None = None,
) -> DetectionResult:
    """Regressions and improvements of one series (commit order, every repetition). ``memo``:
    the series' main search at its previous detection (module doc: incremental), updated."""
    notes: list[str] = []
    name, m = _metric(metric, settings, notes)
    be = catalogue.Backend(backend)
    s = series if isinstance(series, CleanSeries) else clean(series)
    notes.extend(s.notes)
    if len(s) < 2:
        notes.append(f"{len(s)} usable point(s): no verdict before two commits are measured")
        return DetectionResult(name, be.value, (), len(s), 0.0, 0.0, tuple(notes))
    medians = s.medians

    if be is catalogue.Backend.SIM:
        cps = find_exact_changes(medians, m, settings.tolerance)
        changes = tuple(_change(s, cp, name, be, m, None, pinned=True) for cp in cps)
        for i, x in enumerate(s.samples):
            if np.ptp(x) > settings.tolerance * max(abs(float(np.median(x))), 1e-300):
                notes.append(f"{s.commits[i]}: deterministic repetitions differ (median used)")
        return DetectionResult(name, be.value, changes, len(s), 0.0, settings.tolerance, tuple(notes))

    own = s.first_jobs() if settings.search_own_jobs else s  # module doc: levels
    noise, point_sigma = series_noise(own)
    min_effect = learned_min_effect(noise, settings.min_change, settings.noise_factor)
    scaled = to_scale(own.medians)
    learned = learned_part(s.positions, settings.block)
    learn, frame = slice(None), None  # learned on every point
    if learned < len(s):
        learn = slice(learned)
        _, point_sigma = series_noise(own, learn)
        frame = Frame.of(scaled[:learned], point_sigma[:learned], settings.search)
    proposal = Proposal(own.medians, scaled, point_sigma, settings.search, frame=frame, memo=memo)  # one search, two alphas
    cps = proposal.validated(m, min_effect, settings.search.alpha)
    if own is not s:  # the suspects' search sees every repetition: the rounds must be able to take a suspect away
        proposal = proposal.on(medians, to_scale(medians), series_noise(own, learn, s.counts)[1])
    unconfirmed, by_rounds = _loose(s, cps, proposal, m, min_effect, settings)
    by_rounds_at = {cp.index for cp, _ in by_rounds}
    cps = sorted(cps + [cp for cp, _ in by_rounds], key=lambda cp: cp.index)
    bounds = [cp.index for cp in cps]
    changes = []
    for i, cp in enumerate(cps):
        a = bounds[i - 1] if i > 0 else 0
        b = bounds[i + 1] if i + 1 < len(bounds) else len(s)
        check, pinned = _pin(s, a, cp.index, b, m, min_effect, settings)
        if not pinned:
            pairs = _pairs_test(s, cp, m, min_effect, per_look(settings.commit_alpha, settings) * settings.paired_share)
            check, pinned = (pairs, True) if pairs is not None else (check, False)
        changes.append(replace(_change(s, cp, name, be, m, check, pinned), by_rounds=cp.index in by_rounds_at))
    suspects = _suspects(s, changes, cps, unconfirmed, name, be, settings)
    return DetectionResult(name, be.value, tuple(changes), len(s), noise, min_effect, tuple(notes), suspects)


def _loose(s: CleanSeries, cps: list[ChangePoint], proposal: Proposal, m: catalogue.Metric | None,
           min_effect: float, settings: Settings) -> tuple[list[tuple[ChangePoint, range]], list[tuple[ChangePoint, range]]]:
    """The boundaries the search keeps at ``suspect_alpha`` that no confirmed change covers, each
    with the commits its rounds re-measure: (still unconfirmed, confirmed by the rounds' jobs)."""
    if settings.max_suspects <= 0 or settings.suspect_alpha <= settings.search.alpha:
        return [], []
    covered = [(cp.range_start - 1, cp.range_end + 1) for cp in cps]
    unconfirmed, confirmed = [], []
    if settings.suspect_penalty != settings.search.penalty_factor:
        proposal = proposal.with_tail(replace(settings.search, penalty_factor=settings.suspect_penalty),
                                      settings.suspect_tail)
    loose = proposal.validated(m, min_effect, settings.suspect_alpha)
    best = _best_proposal(s, m, settings)
    if best is not None:
        extra = [cp for cp in best.validated(m, min_effect, settings.suspect_alpha)
                 if all(abs(cp.index - x.index) > 1 for x in loose)]
        loose = sorted(loose + extra, key=lambda cp: cp.index)
    for i, cp in enumerate(loose):
        if any(lo <= cp.index <= hi for lo, hi in covered):
            continue
        around = _around(len(s), cp.index, cp.range_start, cp.range_end, settings.suspect_commits)
        alpha = per_look(settings.search.alpha, settings)
        if can_reject(*s.paired(cp.index - 1, cp.index), alpha * settings.paired_share):
            pairs = _pairs_test(s, cp, m, min_effect, alpha * settings.paired_share)
            if pairs is not None:  # k against k - 1 directly: confirmed and pinned
                confirmed.append((ChangePoint(cp.index, cp.index, cp.index, pairs), around))
                continue
            alpha *= 1.0 - settings.paired_share
        test = _rounds_test(s, cp, around, m, min_effect, settings, alpha)
        if test is not None:  # confirmed where the rounds also pin it: a located alert or none
            a = loose[i - 1].index if i > 0 else 0
            b = loose[i + 1].index if i + 1 < len(loose) else len(s)
            if _pin(s, a, cp.index, b, m, min_effect, settings)[1]:
                confirmed.append((ChangePoint(cp.index, cp.index, cp.index, test), around))
                continue
        unconfirmed.append((cp, around))
    tested = {cp.index for cp in loose}
    for k in s.paired_points():  # pairs the search did not test at their own boundary: their own evidence
        if k in tested or any(lo <= k <= hi for lo, hi in covered) or any(abs(k - c.index) <= 1 for c, _ in confirmed):
            continue
        before, after = s.paired(k - 1, k)
        alpha = per_look(settings.search.alpha, settings) * settings.paired_share
        test = paired_compare(before, after, m, alpha=alpha, min_effect=min_effect)
        around = _around(len(s), k, k, k, settings.suspect_commits)
        near = [u for u in unconfirmed if abs(u[0].index - k) <= 1]
        lean = max(settings.suspect_alpha, min_attainable_p(test.n_before))  # a round's few pairs: all one way
        if test.verdict is Verdict.DIFFERENT:  # pinned at k: a neighbouring boundary of the search is this change
            confirmed.append((ChangePoint(k, k, k, test), around))
            unconfirmed = [u for u in unconfirmed if abs(u[0].index - k) > 1]
        elif test.p_value <= lean and abs(test.rel_change) >= min_effect and not near:
            unconfirmed.append((ChangePoint(k, k, k, test), around))  # leaning, not yet enough pairs: more rounds
    return unconfirmed, confirmed


def per_look(alpha: float, settings: Settings) -> float:
    """The level of one look of a confirmation by rounds: ``alpha`` spent evenly over the
    ``confirm_looks`` rounds that may each add evidence and test again (Bonferroni; module doc)."""
    return look_alpha(alpha, 1, max(1, settings.confirm_looks), "even")


def _best_proposal(s: CleanSeries, m: catalogue.Metric | None, settings: Settings) -> Proposal | None:
    """The suspects' search over the newest commits again, on each commit's best repetitions
    (:meth:`series.CleanSeries.bests`) instead of its median: on a shared host a step hides in
    the median of three runs when one or two of them were slowed down, never in the fastest."""
    if not settings.best_runs or m is None or len(s) < 2 * settings.search.min_segment:
        return None
    values = s.bests(m.direction is catalogue.Direction.LOWER_IS_BETTER)
    scaled = to_scale(values)
    sigma = max(diff_sigma(scaled), NOISE_FLOOR)
    jobs = s.job_counts()
    point_sigma = sigma * np.sqrt(float(np.median(jobs)) / jobs)
    return Proposal(values, scaled, point_sigma, replace(settings.search, penalty_factor=settings.suspect_penalty),
                    tail=settings.best_tail)


def _pairs_test(s: CleanSeries, cp: ChangePoint, m: catalogue.Metric | None, min_effect: float,
                alpha: float) -> Comparison | None:
    """The interleaved pairs of ``k - 1`` and ``k`` (module doc): the paired verdict when it is
    DIFFERENT at ``alpha`` in the boundary's direction, else None (also without pairs)."""
    k = cp.index
    if k < 1:
        return None
    before, after = s.paired(k - 1, k)
    if not len(before):
        return None
    test = paired_compare(before, after, m, alpha=alpha, min_effect=min_effect)
    if test.verdict is Verdict.DIFFERENT and np.sign(test.rel_change) == np.sign(cp.test.rel_change):
        return test
    return None


def _rounds_test(s: CleanSeries, cp: ChangePoint, around: range, m: catalogue.Metric | None,
                 min_effect: float, settings: Settings, alpha: float) -> Comparison | None:
    """An unconfirmed boundary's test on its re-measured commits, one value per *job*: the jobs of
    the commits before it against the jobs of the commits from it on, on the jobs' medians and on
    their best runs (module doc). The verdict when it confirms the boundary (DIFFERENT at
    ``alpha`` shared by the two, the same direction), else None.

    Without extra rounds each commit is one job, and the few commits around a suspect cannot
    reach the alpha (at most 3 against 4 commits: p >= 0.057): only rounds can confirm this way."""
    for test in rounds_tests(s, cp.index, around, m, min_effect, settings, alpha):
        if test.verdict is Verdict.DIFFERENT and np.sign(test.rel_change) == np.sign(cp.test.rel_change):
            return test
    return None


def rounds_tests(s: CleanSeries, k: int, around: range, m: catalogue.Metric | None, min_effect: float,
                 settings: Settings, alpha: float) -> list[Comparison]:
    """The rounds' tests of a boundary at ``k`` (:func:`_rounds_test`), every one, passed or not: the jobs'
    medians, then (``best_runs``) the jobs' best runs, each at its share of ``alpha``. Empty when ``k`` leaves
    no job on one side. Public so that the benchmark's diagnosis can show how close a missed step came."""
    if k <= around.start or k >= around.stop:
        return []
    per_job = [(s.run_medians(around.start, k), s.run_medians(k, around.stop))]
    if settings.best_runs and m is not None:  # the best of each job too; the two tests share the alpha (Bonferroni)
        low = m.direction is catalogue.Direction.LOWER_IS_BETTER
        per_job.append((s.run_best(around.start, k, low), s.run_best(k, around.stop, low)))
    alpha /= len(per_job)
    return [compare(before, after, m, alpha=alpha, min_effect=min_effect) for before, after in per_job]


def _suspects(s: CleanSeries, changes: list[Change], cps: list[ChangePoint],
              unconfirmed: list[tuple[ChangePoint, range]], name: str, be: catalogue.Backend,
              settings: Settings) -> tuple[Suspect, ...]:
    """Unconfirmed boundaries (the search at ``suspect_alpha``) and unpinned changes (module doc)."""
    if settings.max_suspects <= 0 or settings.suspect_alpha <= settings.search.alpha:
        return ()
    out: list[Suspect] = []
    for cp, around in unconfirmed:
        kind = cp.test.kind if cp.test.kind is not Kind.NONE else Kind.CHANGE
        out.append(Suspect("unconfirmed", kind, name, be.value, s.commits[cp.index],
                           tuple(s.commits[i] for i in around), cp.test.rel_change, cp.test.p_value))
    for ch, cp in zip(changes, cps):
        if ch.pinned:
            continue
        around = _around(len(s), cp.index, cp.range_start, cp.range_end, settings.suspect_commits)
        out.append(Suspect("unpinned", ch.kind, name, be.value, ch.suspect, tuple(s.commits[i] for i in around),
                           ch.rel_change, ch.p_value))
    out.sort(key=lambda x: (x.p_value, -abs(x.rel_change)))
    return tuple(out[:settings.max_suspects])


def _around(n: int, k: int, lo: int, hi: int, most: int) -> range:
    """Positions to re-measure for a change at ``k`` located in [lo, hi]: the commit before the
    range to the commit after it, and at least ``k - 2`` to ``k + 2`` (the jobs on each side are
    what confirms it), at most ``most`` of them centred on ``k``."""
    lo, hi = max(0, min(lo, k - 1) - 1), min(n - 1, max(hi, k + 1) + 1)
    half = max(1, most // 2)
    lo, hi = max(lo, k - half), min(hi, k + half)
    return range(lo, hi + 1)


def _pin(s: CleanSeries, a: int, k: int, b: int, m: catalogue.Metric | None, min_effect: float,
         settings: Settings) -> tuple[Comparison, bool]:
    """Per-commit test of the suspect ``k`` on the repetitions; pinned when both edges differ."""
    p = settings.pin_commits
    before = s.pooled(max(a, k - p), k)
    check = compare(before, s.samples[k], m, alpha=settings.commit_alpha, min_effect=min_effect)
    if check.verdict is not Verdict.DIFFERENT:
        return check, False
    after = s.pooled(k, min(b, k + p))
    back = compare(s.samples[k - 1], after, m, alpha=settings.commit_alpha, min_effect=min_effect)
    same_sign = np.sign(back.rel_change) == np.sign(check.rel_change)
    return check, bool(back.verdict is Verdict.DIFFERENT and same_sign)


def _change(s: CleanSeries, cp: ChangePoint, name: str, be: catalogue.Backend, m: catalogue.Metric | None,
            check: Comparison | None, pinned: bool) -> Change:
    if pinned:
        lo = hi = cp.index
    else:  # the profile range, one commit wider each way: noise is rarely as Gaussian as modelled
        lo, hi = max(1, cp.range_start - 1), min(len(s) - 1, cp.range_end + 1)
    t = cp.test
    kind = t.kind if t.kind is not Kind.NONE else Kind.CHANGE
    return Change(
        kind=kind, metric=name, backend=be.value, index=s.positions[cp.index], suspect=s.commits[cp.index],
        last_good=s.commits[lo - 1], first_bad=s.commits[hi], candidates=s.commits[lo:hi + 1],
        pinned=lo == hi, before_median=t.before_median, after_median=t.after_median,
        rel_change=t.rel_change, p_value=t.p_value, confidence=t.confidence,
        min_effect=t.min_effect, exact=t.exact, commit_check=check,
    )


class IncrementalDetector:
    """Detection that stays cheap as points are appended one at a time (after each ingest).

    Each :meth:`append` re-examines only the last ``settings.tail_window`` points, or up to a
    block fewer (the tail starts at a block edge, :func:`window_start`), and keeps its main search for the
    next append (:class:`.changepoints.SearchMemo`). Changes found
    earlier at positions more than one validation window before that tail are kept as they were
    (their evidence on both sides was complete when they were found); the rest are replaced by
    the fresh analysis of the tail, so a change is updated in place, never duplicated.
    """

    def __init__(self, metric: str | catalogue.Metric, backend: catalogue.Backend | str,
                 settings: Settings = Settings()):
        self.metric, self.backend, self.settings = metric, catalogue.Backend(backend), settings
        self._commits: list[str] = []
        self._samples: list[np.ndarray] = []
        self._positions: list[int] = []  # each kept point's position among the appended ones
        self._appended = 0
        self._notes: list[str] = []
        self._frozen: list[Change] = []
        self._result: DetectionResult | None = None
        self._memo = SearchMemo()

    def __len__(self) -> int:
        return len(self._commits)

    @property
    def result(self) -> DetectionResult:
        if self._result is None:
            return detect([], self.metric, self.backend, self.settings)
        return self._result

    def append(self, commit: str, values: float | Iterable[float]) -> DetectionResult:
        c = clean([Point.of(commit, values)])
        self._notes.extend(c.notes)
        if len(c):
            self._commits.append(c.commits[0])
            self._samples.append(c.samples[0])
            self._positions.append(self._appended)
        self._appended += 1
        n = len(self._commits)
        tail = max(self.settings.tail_window, 4 * self.settings.search.window)
        start = 0
        if n > tail:  # the first kept point at or after the block edge at or after the cut
            start = bisect_left(self._positions, window_start(self._positions[n - tail], self.settings.block))
        window = CleanSeries(tuple(self._commits[start:]), tuple(self._samples[start:]),
                             positions=tuple(self._positions[start:]))
        fresh = detect(window, self.metric, self.backend, self.settings, self._memo)  # indices: appended positions
        keep_below = start + self.settings.search.window if start > 0 else 0
        cut = self._positions[keep_below] if keep_below < n else self._appended
        self._frozen = [ch for ch in self._frozen if ch.index < cut]
        self._frozen.extend(ch for ch in fresh.changes if ch.index >= cut)
        self._result = DetectionResult(fresh.metric, fresh.backend, tuple(self._frozen), n, fresh.noise,
                                       fresh.min_effect, tuple(self._notes) + fresh.notes,
                                       fresh.suspects)
        return self._result
