"""Bisection: which commit of an ordered range moved a metric from ``good``'s level to ``bad``'s.

Pure (numbers in, decisions out); the same search runs locally (``perfci bisect --local``), on
the server (Celery, one job per commit) and in the benchmark. Modelled on asv ``find`` and git
bisect, with Chromium Pinpoint's per-step statistics:

1. *endpoints* — measure ``good`` (index 0) and ``bad`` (index n-1) and compare them with
   :func:`compare.compare`. SAME ends with "no change"; DIFFERENT fixes the *kind* being searched
   (regression or improvement) and the minimum effect of a step (half the endpoints' change, so a
   change split over several commits still finds its biggest part); UNKNOWN adds repetitions.
2. *search* — keep ``lo`` (at the old level) and ``hi`` (at the new level); measure a middle
   commit and move ``lo`` or ``hi`` by direction-aware verdicts: ``lo -> mid`` DIFFERENT of the
   searched kind puts the change in (lo, mid]; ``mid -> hi`` of that kind puts it in (mid, hi];
   SAME on one side puts it on the other. An improvement elsewhere in the range is DIFFERENT of
   the other kind and never mistaken for the regression. While a deciding verdict is UNKNOWN the
   commits compared get ``step_reps`` more repetitions, up to ``max_reps`` (Pinpoint: "10 more
   attempts"); at the cap the larger move in the searched direction decides, with a note.
   Commits that do not build are skipped like ``git bisect skip``: the next middle is the
   buildable commit nearest the centre; if only unbuildable commits separate ``lo`` and ``hi``
   the culprit is ambiguous between them and ``hi``.
3. *confirm* — fresh repetitions of the culprit and its parent (when the runner can measure
   again) must again differ by the searched kind.

Deterministic (``sim``) metrics use the exact-change rule of :func:`compare.compare`: one
repetition per commit decides.

The search state (:class:`State`) is plain data, so the server can store it between results.
Decisions, once taken, are final (as in git bisect): each call of :meth:`Bisection.next` only
looks at the current middle.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Literal, Mapping, Sequence

import numpy as np

from perfci_core import metrics as catalogue

from .compare import DEFAULT_ALPHA, DEFAULT_TOLERANCE, Comparison, Kind, Verdict, compare, kind_of
from .noise import MAD_TO_SIGMA
from .series import resolve_metric

MIN_EFFECT_FLOOR = 0.002  # the detection floor: a relative change below 0.2 % is not a culprit
STEP_SHARE = 0.5  # a culprit step moves at least half of the good -> bad change
MIN_NOISE_RESIDUALS = 6  # pooled noise needs this many residuals, else compare() estimates it

Phase = Literal["endpoints", "search", "confirm", "done"]
Status = Literal["culprit", "ambiguous", "unconfirmed", "no_change", "inconclusive"]


@dataclass(frozen=True)
class Policy:
    """How many repetitions to take and which rule decides."""

    exact: bool  # deterministic backend: the exact-change rule, no statistics
    metric: str | None = None  # catalogue name: says which direction is a regression
    initial_reps: int = 5
    step_reps: int = 5
    max_reps: int = 40
    alpha: float = DEFAULT_ALPHA
    min_effect: float | None = None  # relative; None: STEP_SHARE x the endpoints' change
    tolerance: float = DEFAULT_TOLERANCE
    remeasure: bool = True  # the confirm step takes fresh repetitions (False: reuse the search's)

    @classmethod
    def for_backend(cls, backend: str | catalogue.Backend, metric: str | None = None, **overrides: object) -> Policy:
        """Defaults per backend: ``sim`` one repetition per commit, noisy ones 5, +5, up to 40."""
        if catalogue.Backend(backend) is catalogue.Backend.SIM:
            base = cls(exact=True, metric=metric, initial_reps=1, step_reps=1, max_reps=3)
        else:
            base = cls(exact=False, metric=metric)
        return base if not overrides else cls(**{**asdict(base), **overrides})  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        if not 1 <= self.initial_reps <= self.max_reps or self.step_reps < 1:
            raise ValueError(f"need 1 <= initial_reps <= max_reps and step_reps >= 1, got {self}")


@dataclass
class Observation:
    """What is known about one commit: its repetitions, or that it does not build."""

    samples: list[float] = field(default_factory=list)
    unbuildable: bool = False
    exhausted: bool = False  # the runner cannot measure it again (e.g. a server job already done)

    def can_grow(self, cap: int) -> bool:
        return not (self.unbuildable or self.exhausted) and len(self.samples) < cap


@dataclass(frozen=True)
class Measure:
    """Measure these commits until each has ``reps`` repetitions (``fresh``: confirmation samples)."""

    wants: tuple[tuple[int, int], ...]
    why: str
    fresh: bool = False


@dataclass(frozen=True)
class Outcome:
    status: Status
    message: str
    parent: int | None = None  # last commit at the old level
    culprit: int | None = None  # first commit at the new level
    skipped: tuple[int, ...] = ()  # unbuildable commits between parent and culprit
    kind: Kind = Kind.NONE
    overall: Comparison | None = None  # good vs bad
    step: Comparison | None = None  # parent vs culprit (the confirming comparison)
    notes: tuple[str, ...] = ()

    @property
    def found(self) -> bool:
        return self.status == "culprit"


@dataclass
class State:
    """The search's progress, JSON-serialisable (see :meth:`to_dict`)."""

    n: int
    lo: int = 0
    hi: int = -1
    phase: Phase = "endpoints"
    kind: str | None = None
    min_effect: float | None = None
    steps: list[dict] = field(default_factory=list)  # one entry per decision, for the report
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.hi < 0:
            self.hi = self.n - 1

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> State:
        return cls(**dict(data))


class Bisection:
    """One bisection over commits ``0 .. n-1`` (0 = good, n-1 = bad, first-parent order)."""

    def __init__(self, n: int, policy: Policy, state: State | None = None,
                 observations: Mapping[int, Observation] | None = None) -> None:
        if n < 2:
            raise ValueError("a bisection needs a good and a bad commit (n >= 2)")
        self.n, self.policy = n, policy
        self.state = state or State(n)
        self.obs: dict[int, Observation] = dict(observations or {})
        self.fresh: dict[int, Observation] = {}  # confirmation repetitions
        self.outcome: Outcome | None = None

    # --- input ---------------------------------------------------------------------------------

    def record(self, index: int, samples: Sequence[float] = (), *, unbuildable: bool = False,
               exhausted: bool = False, fresh: bool = False) -> None:
        book = self.fresh if fresh else self.obs
        o = book.setdefault(index, Observation())
        o.samples.extend(float(x) for x in samples)
        o.unbuildable = o.unbuildable or unbuildable
        o.exhausted = o.exhausted or exhausted

    def _o(self, i: int, fresh: bool = False) -> Observation:
        return (self.fresh if fresh else self.obs).get(i) or Observation()

    def count(self, index: int, fresh: bool = False) -> int:
        """Repetitions recorded for commit ``index`` (search or confirmation ones)."""
        return len(self._o(index, fresh).samples)

    def _towards(self, c: Comparison, target: Kind) -> float:
        """How far a comparison's medians moved in the searched direction (negative: the other way)."""
        if not math.isfinite(c.rel_change) or c.rel_change == 0:
            return 0.0
        metric = resolve_metric(self.policy.metric) if self.policy.metric else None
        along = kind_of(metric, c.before_median, c.after_median) in (target, Kind.CHANGE)
        return abs(c.rel_change) if along else -abs(c.rel_change)

    # --- the search ----------------------------------------------------------------------------

    def next(self) -> Measure | Outcome:
        """What to measure next, or the outcome. Call again after recording the measurements."""
        while self.outcome is None:
            step = {"endpoints": self._endpoints, "search": self._search, "confirm": self._confirm}[self.state.phase]()
            if step is not None:
                return step
        return self.outcome

    def _finish(self, outcome: Outcome) -> None:
        self.state.phase = "done"
        self.outcome = outcome

    def _compare(self, a: Observation, b: Observation, min_effect: float) -> Comparison:
        return compare(a.samples, b.samples, self.policy.metric, backend="sim" if self.policy.exact else None,
                       alpha=self.policy.alpha, min_effect=min_effect, noise=self._noise(),
                       tolerance=self.policy.tolerance)

    def _noise(self) -> float | None:
        """Relative per-repetition noise pooled over every commit measured more than once.

        From within-commit pairwise differences (scale sigma x sqrt 2), MAD-style around zero:
        residuals around each commit's own median would shrink it (with 5 repetitions one
        residual is always 0), and an underestimated noise makes SAME too easy.
        """
        if self.policy.exact:
            return None
        groups = [np.asarray(o.samples) for o in (*self.obs.values(), *self.fresh.values()) if len(o.samples) >= 2]
        diffs = [np.abs(g[:, None] - g[None, :])[np.triu_indices(g.size, 1)] for g in groups]
        if sum(d.size for d in diffs) < MIN_NOISE_RESIDUALS:
            return None
        level = float(np.median(np.concatenate(groups)))
        if level == 0:
            return None
        return MAD_TO_SIGMA * float(np.median(np.concatenate(diffs))) / math.sqrt(2.0) / abs(level)

    def _more(self, pairs: Sequence[tuple[int, bool]]) -> tuple[tuple[int, int], ...]:
        """Repetitions to add (+step, up to the cap) to the commits of UNKNOWN comparisons."""
        p = self.policy
        wants = {}
        for i, fresh in pairs:
            o = self._o(i, fresh)
            if o.can_grow(p.max_reps):
                wants[i] = min(p.max_reps, max(len(o.samples), p.initial_reps) + p.step_reps)
        return tuple(sorted(wants.items()))

    def _initial(self, indices: Sequence[int], fresh: bool = False) -> tuple[tuple[int, int], ...]:
        p = self.policy
        return tuple((i, p.initial_reps) for i in indices
                     if not self._o(i, fresh).unbuildable and len(self._o(i, fresh).samples) < p.initial_reps
                     and not self._o(i, fresh).exhausted)

    def _endpoints(self) -> Measure | None:
        s, p = self.state, self.policy
        good, bad = 0, self.n - 1
        for i, name in ((good, "good"), (bad, "bad")):
            if self._o(i).unbuildable:
                self._finish(Outcome("inconclusive", f"the {name} commit does not build"))
                return None
        wants = self._initial((good, bad))
        if wants:
            return Measure(wants, "endpoints: good and bad")
        floor = p.min_effect if p.min_effect is not None else MIN_EFFECT_FLOOR
        c = self._compare(self._o(good), self._o(bad), floor)
        if c.verdict is Verdict.SAME:
            self._finish(Outcome("no_change", f"good and bad are the same ({c.rel_change:+.3%}, p = {c.p_value:.3g})", overall=c))
            return None
        if c.verdict is Verdict.UNKNOWN:
            more = self._more(((good, False), (bad, False)))
            if more:
                return Measure(more, f"endpoints undecided (p = {c.p_value:.3g})")
            self._finish(Outcome("inconclusive", f"good and bad not distinguishable at {p.max_reps} repetitions "
                                 f"({c.rel_change:+.3%}, p = {c.p_value:.3g})", overall=c))
            return None
        s.kind = c.kind.value
        s.min_effect = p.min_effect if p.min_effect is not None else max(MIN_EFFECT_FLOOR, STEP_SHARE * abs(c.rel_change))
        s.steps.append(_step("endpoints", good, bad, None, c, None, "different"))
        s.phase = "search"
        return None

    def _middle(self) -> int | None:
        lo, hi = self.state.lo, self.state.hi
        candidates = [i for i in range(lo + 1, hi) if not self._o(i).unbuildable]
        if not candidates:
            return None
        centre = (lo + hi) / 2
        return min(candidates, key=lambda i: (abs(i - centre), i))

    def _search(self) -> Measure | None:
        s = self.state
        mid = self._middle()
        if mid is None:
            s.phase = "confirm"
            return None
        wants = self._initial((mid,))
        if wants:
            return Measure(wants, f"middle of {s.hi - s.lo + 1} commits")
        if self._o(mid).unbuildable:
            return None  # recorded meanwhile: the next middle skips it
        target = Kind(s.kind)
        me = s.min_effect or 0.0
        r_lo = self._compare(self._o(s.lo), self._o(mid), me)
        r_hi = self._compare(self._o(mid), self._o(s.hi), me)

        def moved(c: Comparison) -> bool:
            return c.verdict is Verdict.DIFFERENT and c.kind is target

        # Exactly one side moving in the searched direction places the change. SAME alone is not
        # trusted: at a few repetitions it can hide a real step, so the other side must move.
        if moved(r_lo) != moved(r_hi):
            side, why = ("hi", "lo->mid moved") if moved(r_lo) else ("lo", "mid->hi moved")
        else:
            pairs = [(i, False) for i in (s.lo, mid, s.hi)]
            more = self._more(pairs)
            if more:
                return Measure(more, f"commit {mid}: undecided ({r_lo.verdict.value} {r_lo.rel_change:+.2%} / "
                                     f"{r_hi.verdict.value} {r_hi.rel_change:+.2%})")
            side = "hi" if self._towards(r_lo, target) >= self._towards(r_hi, target) else "lo"
            why = "at the repetition cap: the larger move decides"
            s.notes.append(f"commit {mid}: {why}")
        s.steps.append(_step("search", s.lo, s.hi, mid, r_lo, r_hi, why))
        if side == "hi":
            s.hi = mid
        else:
            s.lo = mid
        return None

    def _confirm(self) -> Measure | None:
        s, p = self.state, self.policy
        parent, culprit = s.lo, s.hi
        skipped = tuple(i for i in range(parent + 1, culprit) if self._o(i).unbuildable)
        fresh = p.remeasure
        wants = self._initial((parent, culprit), fresh=True) if fresh else ()
        if wants:
            return Measure(wants, "confirm: culprit and parent again", fresh=True)
        c = self._compare(self._o(parent, fresh), self._o(culprit, fresh), s.min_effect or 0.0)
        target = Kind(s.kind)
        confirmed = c.verdict is Verdict.DIFFERENT and c.kind is target
        if not confirmed:  # as in the search, SAME at a few repetitions is not the last word
            more = self._more(((parent, fresh), (culprit, fresh)))
            if more:
                return Measure(more, f"confirm undecided (p = {c.p_value:.3g})", fresh=fresh)
        overall = self._compare(self._o(0), self._o(self.n - 1), s.min_effect or 0.0)
        if not confirmed:
            status: Status = "unconfirmed"
            msg = f"commit {culprit} did not differ from its parent again ({c.verdict.value}, {c.rel_change:+.3%})"
        elif skipped:
            status = "ambiguous"
            msg = f"the first {target.value} is commit {culprit} or one of the unbuildable {list(skipped)}"
        else:
            status = "culprit"
            msg = f"commit {culprit}: {target.value} {c.rel_change:+.3%}"
        self._finish(Outcome(status, msg, parent, culprit, skipped, target, overall, c, tuple(s.notes)))
        return None


def comparison_dict(c: Comparison | None) -> dict | None:
    """A comparison as plain JSON-able data (reports, the server's stored result)."""
    if c is None:
        return None
    return {"verdict": c.verdict.value, "kind": c.kind.value, "before_median": _num(c.before_median),
            "after_median": _num(c.after_median), "change_pct": _num(100.0 * c.rel_change), "p_value": _num(c.p_value),
            "confidence": _num(c.confidence), "n_before": c.n_before, "n_after": c.n_after, "exact": c.exact}


def _step(phase: str, lo: int, hi: int, mid: int | None, r_lo: Comparison, r_hi: Comparison | None, why: str) -> dict:
    def brief(c: Comparison | None) -> dict | None:
        if c is None:
            return None
        return {"verdict": c.verdict.value, "kind": c.kind.value, "rel_change": _num(c.rel_change), "p_value": _num(c.p_value),
                "n": [c.n_before, c.n_after]}

    return {"phase": phase, "lo": lo, "hi": hi, "mid": mid, "lo_mid": brief(r_lo), "mid_hi": brief(r_hi), "why": why}


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


Sampler = Callable[[int, int, bool], "Sequence[float] | None"]


def run(bisection: Bisection, sample: Sampler, on_step: Callable[[Measure], None] | None = None) -> Outcome:
    """Drive a bisection synchronously. ``sample(index, count, fresh)`` measures ``count`` more
    repetitions of commit ``index`` and returns them, or None when the commit does not build."""
    while True:
        step = bisection.next()
        if isinstance(step, Outcome):
            return step
        if on_step:
            on_step(step)
        for index, reps in step.wants:
            have = bisection.count(index, step.fresh)
            values = sample(index, reps - have, step.fresh)
            if values is None:
                bisection.record(index, unbuildable=True, fresh=step.fresh)
                if step.fresh:
                    bisection.record(index, unbuildable=True)
            elif not values:
                bisection.record(index, exhausted=True, fresh=step.fresh)
            else:
                bisection.record(index, values, fresh=step.fresh)
