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
   attempts"); at the cap the larger move in the searched direction decides, with a note. Each
   look of a comparison tests at its share of ``alpha`` (:attr:`Policy.spending`, :mod:`.sequential`),
   so the looks together reject a null at most ``alpha`` of the time, not ``alpha`` per look; a
   first look (5 vs 5) then never decides, and a clear step is decided at 10 vs 10. A runner that
   cannot add repetitions (the server: one job per commit) takes one look per comparison, at the
   whole ``alpha`` (:meth:`Policy.measured_once`).
   Commits that do not build are skipped like ``git bisect skip``: the next middle is the
   buildable commit nearest the centre; if only unbuildable commits separate ``lo`` and ``hi``
   the culprit is ambiguous between them and ``hi``.
3. *confirm* — fresh repetitions of the culprit and its parent (when the runner can measure
   again) must again differ by the searched kind.

What is hunted (:attr:`Policy.direction`): ``any`` follows the endpoints' overall change (as
asv and git bisect do); ``regression`` or ``improvement`` hunts that kind whatever the endpoints
show. A release manager asking "which commit regressed between these releases?" still wants the
regression when a bigger improvement later in the range makes the releases look better overall,
and a binary search cannot find it then: its invariant ("``lo`` at the old level, ``hi`` at the
new") needs the endpoints to differ in the hunted kind. So when they do not, a *scan* descends
instead: measure the middle of a sub-range, search a half whose ends differ in the hunted kind
(the ordinary search from there), descend into a half that moved the other way (it may hide the
hunted move behind a bigger opposite one; descending also locates that opposite move), and drop
a half whose ends are the same (moves that cancel exactly inside one half are not looked for).

A move against the hunted kind is not silently followed past: whenever a comparison of the
endpoints, the scan or the search is DIFFERENT of the other kind at the detection floor, it is
recorded (commits compared, kind, change, p) — on noisy backends with the repetitions the step
already has (none are added to hunt it). Once the hunted search ends, each such move is
isolated by its own search over the sub-range where it was seen (same rules, its own minimum
effect; largest first; a move whose range holds one already isolated counts as isolated), unless
:attr:`Policy.isolate_opposing` is False. A move whose search cannot confirm it with fresh
repetitions is dismissed (seen once, not again: at 5 vs 5 repetitions chance alone separates the
two samples completely, p = 0.008, in 2 of 252 orderings). The outcome carries them all
(:attr:`Outcome.opposing`).

Pairs. A runner may measure the two commits of a step interleaved (A B A B ..., one session:
the endpoints, a confirmation, more repetitions of an undecided pair) and say so (:class:`Sampled`).
Two commits compared with enough pairs between them to reach alpha are decided on the pairs
(:func:`.paired.paired_compare`), which a host drifting between jobs cannot fool; otherwise, as for
a middle commit measured alone, on all their samples (:func:`.compare.compare`).

Deterministic (``sim``) metrics use the exact-change rule of :func:`compare.compare`: one
repetition per commit decides.

The search state (:class:`State`) is plain data, so the server can store it between results.
Decisions, once taken, are final (as in git bisect): each call of :meth:`Bisection.next` only
looks at the current middle.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Literal, Mapping, Sequence

import numpy as np

from perfci_core import metrics as catalogue

from .compare import DEFAULT_ALPHA, DEFAULT_TOLERANCE, Comparison, Kind, Verdict, compare, kind_of
from .noise import MAD_TO_SIGMA
from .paired import can_reject, paired_compare, pairs_needed
from .sequential import SPENDING, Spending, look_alpha
from .series import resolve_metric

MIN_EFFECT_FLOOR = 0.002  # the detection floor: a relative change below 0.2 % is not a culprit
STEP_SHARE = 0.5  # a culprit step moves at least half of the good -> bad change
MIN_NOISE_RESIDUALS = 6  # pooled noise needs this many residuals, else compare() estimates it

Phase = Literal["endpoints", "scan", "search", "confirm", "done"]
Status = Literal["culprit", "ambiguous", "unconfirmed", "no_change", "inconclusive"]
Direction = Literal["any", "regression", "improvement"]
DIRECTIONS: tuple[str, ...] = ("any", "regression", "improvement")


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
    direction: Direction = "any"  # what to hunt; "any": the kind the endpoints show
    isolate_opposing: bool = True  # search each move seen against the hunted kind for its commit too
    # How a comparison spends ``alpha`` over the looks it takes while UNKNOWN (:mod:`.sequential`);
    # None: every look at the full alpha (the rule before: a flat range's endpoints were called
    # DIFFERENT up to 2.7x as often as alpha).
    spending: Spending | None = "pocock"

    @classmethod
    def for_backend(cls, backend: str | catalogue.Backend, metric: str | None = None, **overrides: object) -> Policy:
        """Defaults per backend: ``sim`` one repetition per commit, noisy ones 5, +5, up to 40."""
        if catalogue.Backend(backend) is catalogue.Backend.SIM:
            base = cls(exact=True, metric=metric, initial_reps=1, step_reps=1, max_reps=3)
        else:
            base = cls(exact=False, metric=metric)
        return base if not overrides else cls(**{**asdict(base), **overrides})  # type: ignore[arg-type]

    @classmethod
    def measured_once(cls, backend: str | catalogue.Backend, metric: str | None, repetitions: int,
                      **overrides: object) -> Policy:
        """A runner that measures each commit once, ``repetitions`` per commit, and cannot add any
        (the server: one job per commit). Every comparison is then one look, at the whole ``alpha``:
        spending it over looks that never come would leave a noisy step undecidable (5 against 5
        repetitions cannot reach the first look's share). The confirm step reuses the search's
        repetitions."""
        if catalogue.Backend(backend) is catalogue.Backend.SIM:
            return cls.for_backend(backend, metric, remeasure=False, **overrides)
        return cls.for_backend(backend, metric, remeasure=False, initial_reps=repetitions, max_reps=repetitions,
                               **overrides)

    def __post_init__(self) -> None:
        if not 1 <= self.initial_reps <= self.max_reps or self.step_reps < 1:
            raise ValueError(f"need 1 <= initial_reps <= max_reps and step_reps >= 1, got {self}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {self.direction!r}")
        if self.direction != "any" and self.metric is None:
            raise ValueError(f"hunting a {self.direction} needs a metric whose better direction is known")
        if self.spending is not None and self.spending not in SPENDING:
            raise ValueError(f"spending must be one of {', '.join(SPENDING)} or None, got {self.spending!r}")

    @property
    def looks(self) -> int:
        """The looks a comparison can take: the initial repetitions, then one per ``step_reps`` up to the cap."""
        return 1 + math.ceil((self.max_reps - self.initial_reps) / self.step_reps)

    def look_alpha(self, reps: int) -> float:
        """The level of a comparison whose smaller side has ``reps`` repetitions: its look's share
        of ``alpha`` (:func:`.sequential.look_alpha`), or ``alpha`` without spending or when exact.

        Between two looks of one comparison every side that can still be measured gets
        ``step_reps`` more, so its smaller side grows and each look has a number of its own: the
        shares it tests at sum to at most ``alpha``. (A smaller side that cannot be measured again,
        an exhausted server job, keeps its number while the other side grows: the one exception.)"""
        if self.exact or self.spending is None:
            return self.alpha
        look = 1 + math.ceil(max(0, reps - self.initial_reps) / self.step_reps)
        return look_alpha(self.alpha, min(look, self.looks), self.looks, self.spending)

    def pairs_needed(self) -> int:
        """The fewest interleaved pairs whose paired test can reach the share of alpha of the look
        they make (8 at alpha = 0.01 without spending, 11 with ``pocock``): what an interleaved
        session of a step takes at least."""
        for n in range(1, self.max_reps + 1):
            if pairs_needed(self.look_alpha(n)) <= n:
                return n
        return pairs_needed(self.look_alpha(self.max_reps))

    @property
    def floor(self) -> float:
        """The smallest relative move that counts (opposing moves and the scan are judged at it)."""
        return self.min_effect if self.min_effect is not None else MIN_EFFECT_FLOOR


@dataclass
class Observation:
    """What is known about one commit: its repetitions, or that it does not build."""

    samples: list[float] = field(default_factory=list)
    unbuildable: bool = False
    exhausted: bool = False  # the runner cannot measure it again (e.g. a server job already done)
    # The interleaved session each sample was measured in (0: measured alone), one per sample; two
    # commits' samples of one session pair up in order (empty: every sample measured alone).
    sessions: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.sessions:
            self.sessions = [0] * len(self.samples)
        if len(self.sessions) != len(self.samples):
            raise ValueError(f"{len(self.samples)} samples but {len(self.sessions)} session keys")

    def can_grow(self, cap: int) -> bool:
        return not (self.unbuildable or self.exhausted) and len(self.samples) < cap


@dataclass(frozen=True)
class Measure:
    """Measure these commits until each has ``reps`` repetitions (``fresh``: confirmation samples)."""

    wants: tuple[tuple[int, int], ...]
    why: str
    fresh: bool = False


@dataclass(frozen=True)
class Sampled:
    """A sampler's answer when the repetitions were measured interleaved with another commit's in
    one session (:func:`run`): the session's key pairs them with that commit's."""

    values: Sequence[float]
    session: int


def paired_samples(a: Observation, b: Observation) -> tuple[np.ndarray, np.ndarray]:
    """``a``'s and ``b``'s samples measured in the same sessions, side by side: the i-th sample of a
    session on one side pairs with the i-th on the other. A session whose sides differ in size is
    left out: a side lost repetitions, so its order no longer matches (as detection's
    :meth:`.series.CleanSeries.paired`)."""
    before: list[float] = []
    after: list[float] = []
    for key in sorted(set(a.sessions) & set(b.sessions) - {0}):
        xs = [x for x, k in zip(a.samples, a.sessions) if k == key]
        ys = [y for y, k in zip(b.samples, b.sessions) if k == key]
        if len(xs) == len(ys):
            before += xs
            after += ys
    return np.asarray(before, dtype=float), np.asarray(after, dtype=float)


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
    direction: str = "any"  # what was hunted (Policy.direction)
    # Moves against the hunted kind seen on the way, as plain data: the range ``good`` .. ``bad``
    # (indices) where seen, kind, change_pct, p_value, exact, seen (phase); once its own search
    # ran: status, message, parent, culprit, skipped, change; and at the end ``isolated`` (its
    # culprit is known: its own search found it, or another isolated move of the same kind lies in
    # its range) and ``dismissed`` (its search could not confirm it with fresh repetitions: not
    # seen again, so not counted as a move).
    opposing: tuple[dict, ...] = ()

    @property
    def found(self) -> bool:
        return self.status == "culprit"

    @property
    def opposing_moves(self) -> tuple[dict, ...]:
        """The opposing moves that stand (the dismissed ones left out)."""
        return tuple(m for m in self.opposing if not m.get("dismissed"))

    @property
    def opposing_isolated(self) -> bool:
        """Every opposing move that stands is isolated (False when there is none)."""
        moves = self.opposing_moves
        return bool(moves) and all(m.get("isolated") for m in moves)


@dataclass
class State:
    """The search's progress, JSON-serialisable (see :meth:`to_dict`)."""

    n: int
    lo: int = 0
    hi: int = -1
    phase: Phase = "endpoints"
    kind: str | None = None  # the kind the current search follows
    min_effect: float | None = None
    steps: list[dict] = field(default_factory=list)  # one entry per decision, for the report
    notes: list[str] = field(default_factory=list)
    direction: str = "any"  # Policy.direction, kept so a stored search resumes hunting the same
    hunted: str | None = None  # the kind hunted (the endpoints' kind under "any")
    stage: Literal["hunt", "opposing"] = "hunt"  # "opposing": isolating a move against the hunted kind
    queue: list[list[int]] = field(default_factory=list)  # scan: sub-ranges [a, b] still to look into
    opposing: list[dict] = field(default_factory=list)  # moves against the hunted kind seen so far
    first: dict | None = None  # the hunted search's result while opposing moves are isolated
    current: int | None = None  # the opposing move being isolated (index into ``opposing``)

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
        self.state = state or State(n, direction=policy.direction)
        if self.state.direction != policy.direction:
            raise ValueError(f"the stored search hunts {self.state.direction!r}, the policy {policy.direction!r}")
        self.obs: dict[int, Observation] = dict(observations or {})
        self.fresh: dict[int, Observation] = {}  # confirmation repetitions
        self.outcome: Outcome | None = None

    # --- input ---------------------------------------------------------------------------------

    def record(self, index: int, samples: Sequence[float] = (), *, unbuildable: bool = False,
               exhausted: bool = False, fresh: bool = False, session: int = 0) -> None:
        """``session``: the interleaved session the samples were measured in (0: alone)."""
        book = self.fresh if fresh else self.obs
        o = book.setdefault(index, Observation())
        o.samples.extend(float(x) for x in samples)
        o.sessions.extend([session] * len(samples))
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
            phases = {"endpoints": self._endpoints, "scan": self._scan, "search": self._search, "confirm": self._confirm}
            step = phases[self.state.phase]()
            if step is not None:
                return step
        return self.outcome

    def _finish(self, outcome: Outcome) -> None:
        self.state.phase = "done"
        self.outcome = outcome

    def _compare(self, a: Observation, b: Observation, min_effect: float) -> Comparison:
        """On the pairs when the two commits were measured interleaved in enough sessions to reach
        alpha (a host drifting between jobs cannot fool the paired test; :mod:`.paired`), else on
        all their samples. Whether the pairs can reach alpha depends on the sizes of their
        differences only, not their signs, so choosing the test this way keeps its level."""
        p = self.policy
        alpha = p.look_alpha(min(len(a.samples), len(b.samples)))  # this look's share (Policy.spending)
        if not p.exact:
            before, after = paired_samples(a, b)
            if before.size and can_reject(before, after, alpha):
                return paired_compare(before, after, p.metric, alpha=alpha, min_effect=min_effect, tolerance=p.tolerance)
        return compare(a.samples, b.samples, p.metric, backend="sim" if p.exact else None,
                       alpha=alpha, min_effect=min_effect, noise=self._noise(), tolerance=p.tolerance)

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

    def _step_effect(self, c: Comparison) -> float:
        """The minimum effect of a search over a range that moved by ``c``: half of it (at least the floor)."""
        p = self.policy
        return p.min_effect if p.min_effect is not None else max(MIN_EFFECT_FLOOR, STEP_SHARE * abs(c.rel_change))

    # --- moves against the hunted kind ----------------------------------------------------------

    def _opposite(self, c: Comparison) -> bool:
        hunted = self.state.hunted
        return (hunted is not None and c.verdict is Verdict.DIFFERENT
                and c.kind in (Kind.REGRESSION, Kind.IMPROVEMENT) and c.kind.value != hunted)

    def _note_opposing(self, a: int, b: int, c: Comparison, seen: str) -> None:
        """Record a move against the hunted kind seen between commits ``a`` and ``b``. A move seen
        again inside a range already recorded (the scan narrowing it down) replaces that range."""
        s = self.state
        if s.stage != "hunt" or not self._opposite(c):
            return
        move = {"good": a, "bad": b, "kind": c.kind.value, "change_pct": _num(100.0 * c.rel_change),
                "p_value": _num(c.p_value), "exact": c.exact, "seen": seen}
        s.opposing = [m for m in s.opposing
                      if not (m["kind"] == move["kind"] and m["good"] <= a and b <= m["bad"])] + [move]

    def _check_opposing(self, a: int, b: int, c: Comparison, seen: str) -> None:
        """Judge a search step for a move against the hunted kind at the floor, not at the search's
        minimum effect (half the hunted change): a +1.6 % regression is a move worth reporting
        even while a -6.4 % improvement is followed. The exact rule ignores the minimum effect."""
        if not self.policy.exact and (self.state.min_effect or 0.0) > self.policy.floor:
            c = self._compare(self._o(a), self._o(b), self.policy.floor)
        self._note_opposing(a, b, c, seen)

    # --- phases --------------------------------------------------------------------------------

    def _endpoints(self) -> Measure | None:
        s, p = self.state, self.policy
        good, bad = 0, self.n - 1
        for i, name in ((good, "good"), (bad, "bad")):
            if self._o(i).unbuildable:
                self._finish(self._with_direction(Outcome("inconclusive", f"the {name} commit does not build")))
                return None
        wants = self._initial((good, bad))
        if wants:
            return Measure(wants, "endpoints: good and bad")
        c = self._compare(self._o(good), self._o(bad), p.floor)
        if c.verdict is Verdict.UNKNOWN:
            more = self._more(((good, False), (bad, False)))
            if more:
                return Measure(more, f"endpoints undecided (p = {c.p_value:.3g})")
            self._finish(self._with_direction(Outcome(
                "inconclusive", f"good and bad not distinguishable at {p.max_reps} repetitions "
                f"({change_text(c.rel_change)}, p = {c.p_value:.3g})", overall=c)))
            return None
        if p.direction == "any":
            if c.verdict is Verdict.SAME:
                self._finish(self._with_direction(Outcome(
                    "no_change", f"good and bad are the same ({change_text(c.rel_change)}, p = {c.p_value:.3g})", overall=c)))
                return None
            s.hunted = c.kind.value
        else:
            s.hunted = p.direction
        s.steps.append(_step("endpoints", good, bad, None, c, None, c.verdict.value))
        if c.verdict is Verdict.DIFFERENT and c.kind.value == s.hunted:
            s.kind, s.min_effect, s.phase = c.kind.value, self._step_effect(c), "search"
            return None
        # The endpoints do not show the hunted kind (the same, or the other kind): scan inside.
        self._note_opposing(good, bad, c, "endpoints")
        shown = "the same" if c.verdict is Verdict.SAME else f"an overall {c.kind.value} of {change_text(c.rel_change)}"
        s.notes.append(f"good and bad show {shown}: scanning the range for a {s.hunted}")
        s.queue, s.phase = [[good, bad]], "scan"
        return None

    def _middle(self, lo: int | None = None, hi: int | None = None) -> int | None:
        lo = self.state.lo if lo is None else lo
        hi = self.state.hi if hi is None else hi
        candidates = [i for i in range(lo + 1, hi) if not self._o(i).unbuildable]
        if not candidates:
            return None
        centre = (lo + hi) / 2
        return min(candidates, key=lambda i: (abs(i - centre), i))

    def _scan(self) -> Measure | None:
        """Look for the hunted kind inside sub-ranges whose ends do not show it (see the module doc)."""
        s, p = self.state, self.policy
        if not s.queue:
            self._hunt_done(Outcome("no_change", f"no {s.hunted} between good and bad at the "
                                    f"{'exact rule' if p.exact else f'{p.floor:.1%} floor'}"))
            return None
        a, b = s.queue[0]
        mid = self._middle(a, b)
        ends = (a, b) if mid is None else (a, mid, b)
        wants = self._initial(ends)
        if wants:
            return Measure(wants, f"scan: commits {a}..{b} for a {s.hunted}")
        if any(self._o(i).unbuildable for i in ends):
            return None  # recorded meanwhile: the next middle skips it
        halves = [(a, b)] if mid is None else [(a, mid), (mid, b)]
        cs = [self._compare(self._o(x), self._o(y), p.floor) for x, y in halves]
        if any(c.verdict is Verdict.UNKNOWN for c in cs):
            more = self._more([(i, False) for i in ends])
            if more:
                return Measure(more, f"scan: commits {a}..{b} undecided")
        s.queue.pop(0)
        s.steps.append(_step("scan", a, b, mid, cs[0], cs[1] if mid is not None else None,
                             " / ".join(f"{x}->{y} {c.verdict.value} {c.kind.value}" for (x, y), c in zip(halves, cs))))
        hunted = [(x, y, c) for (x, y), c in zip(halves, cs) if c.verdict is Verdict.DIFFERENT and c.kind.value == s.hunted]
        if hunted:  # the earliest half that moved the hunted way: the ordinary search from here
            x, y, c = hunted[0]
            for other in hunted[1:]:
                s.notes.append(f"another {s.hunted} ({change_text(other[2].rel_change)}) between commits {other[0]} and "
                               f"{other[1]} was not searched")
            for (hx, hy), hc in zip(halves, cs):
                self._note_opposing(hx, hy, hc, "scan")
            s.lo, s.hi, s.kind, s.min_effect, s.phase = x, y, s.hunted, self._step_effect(c), "search"
            s.queue = []
            return None
        deeper = []
        for (x, y), c in zip(halves, cs):
            if self._opposite(c):
                self._note_opposing(x, y, c, "scan")
                if mid is not None:
                    deeper.append([x, y])  # may hide the hunted kind behind a bigger opposite move
            elif c.verdict is Verdict.UNKNOWN:
                s.notes.append(f"scan: commits {x}..{y} undecided at {p.max_reps} repetitions ({change_text(c.rel_change)}); "
                               "not looked into")
        s.queue = deeper + s.queue
        return None

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
                return Measure(more, f"commit {mid}: undecided ({r_lo.verdict.value} {change_text(r_lo.rel_change, 2)} / "
                                     f"{r_hi.verdict.value} {change_text(r_hi.rel_change, 2)})")
            side = "hi" if self._towards(r_lo, target) >= self._towards(r_hi, target) else "lo"
            why = "at the repetition cap: the larger move decides"
            s.notes.append(f"commit {mid}: {why}")
        s.steps.append(_step("search", s.lo, s.hi, mid, r_lo, r_hi, why, s.stage))
        self._check_opposing(s.lo, mid, r_lo, "search")
        self._check_opposing(mid, s.hi, r_hi, "search")
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
        if not confirmed:
            status: Status = "unconfirmed"
            msg = f"commit {culprit} did not differ from its parent again ({c.verdict.value}, {change_text(c.rel_change)})"
        elif skipped:
            status = "ambiguous"
            msg = f"the first {target.value} is commit {culprit} or one of the unbuildable {list(skipped)}"
        else:
            status = "culprit"
            msg = f"commit {culprit}: {target.value} {change_text(c.rel_change)}"
        found = Outcome(status, msg, parent, culprit, skipped, target, None, c)
        if s.stage == "hunt":
            self._hunt_done(found)
        else:
            self._isolated(found, c)
        return None

    # --- the end: the hunted result, then the largest opposing move isolated -------------------

    def _hunt_done(self, found: Outcome) -> None:
        s = self.state
        s.first = {"status": found.status, "message": found.message, "parent": found.parent, "culprit": found.culprit,
                   "skipped": list(found.skipped), "kind": found.kind.value, "min_effect": s.min_effect}
        self._isolate_next()

    def _explained(self, move: Mapping) -> bool:
        """An isolated move of the same kind lies in this move's range (seen twice, found once)."""
        return any(o.get("status") == "culprit" and o["kind"] == move["kind"] and move["good"] < o["culprit"] <= move["bad"]
                   for o in self.state.opposing)

    def _isolate_next(self) -> None:
        """Search the largest opposing move not isolated yet (one after the other), then finish."""
        s, p = self.state, self.policy
        todo = [i for i, m in enumerate(s.opposing) if "status" not in m and not self._explained(m)]
        if not (p.isolate_opposing and todo):
            self._finish(self._final())
            return
        s.current = max(todo, key=lambda i: abs(s.opposing[i]["change_pct"] or 0.0))
        move = s.opposing[s.current]
        rel = (move["change_pct"] or 0.0) / 100.0
        s.stage, s.lo, s.hi, s.kind, s.phase = "opposing", move["good"], move["bad"], move["kind"], "search"
        s.min_effect = p.min_effect if p.min_effect is not None else max(MIN_EFFECT_FLOOR, STEP_SHARE * abs(rel))
        s.notes.append(f"isolating the {move['kind']} ({_pct_text(move)}) seen between commits {move['good']} and {move['bad']}")

    def _isolated(self, found: Outcome, c: Comparison) -> None:
        s = self.state
        assert s.current is not None
        s.opposing[s.current].update(status=found.status, message=found.message, parent=found.parent,
                                     culprit=found.culprit, skipped=list(found.skipped), change=comparison_dict(c))
        self._isolate_next()

    def _final(self) -> Outcome:
        s, f = self.state, self.state.first or {}
        step = None
        if f.get("culprit") is not None:
            fresh = self.policy.remeasure
            step = self._compare(self._o(f["parent"], fresh), self._o(f["culprit"], fresh), f.get("min_effect") or 0.0)
        overall = self._compare(self._o(0), self._o(self.n - 1), self.policy.floor)
        notes = list(s.notes)
        moves = []
        for m in s.opposing:
            m = {**m, "isolated": m.get("status") == "culprit" or self._explained(m),
                 "dismissed": m.get("status") == "unconfirmed"}
            size = f"of {m['change_pct']:+.3f} %" if m["change_pct"] is not None else "from zero"
            what = f"{_a(m['kind'])} {size} between commits {m['good']} and {m['bad']}"
            if m.get("status") == "culprit":
                notes.append(f"also {what}: isolated at commit {m['culprit']}")
            elif m["isolated"]:
                notes.append(f"also {what}: the one isolated inside it")
            elif m["dismissed"]:
                notes.append(f"{what} was seen once but not again in fresh repetitions: not counted")
            else:
                why = f" ({m['status']}: {m['message']})" if m.get("status") else ""
                notes.append(f"also {what}: not isolated{why}")
            moves.append(m)
        return Outcome(f["status"], f["message"], f["parent"], f["culprit"], tuple(f["skipped"]), Kind(f["kind"]),
                       overall, step, tuple(notes), s.direction, tuple(moves))

    def _with_direction(self, o: Outcome) -> Outcome:
        return replace(o, direction=self.state.direction, notes=tuple(self.state.notes))


def comparison_dict(c: Comparison | None) -> dict | None:
    """A comparison as plain JSON-able data (reports, the server's stored result)."""
    if c is None:
        return None
    return {"verdict": c.verdict.value, "kind": c.kind.value, "before_median": _num(c.before_median),
            "after_median": _num(c.after_median), "change_pct": _num(100.0 * c.rel_change), "p_value": _num(c.p_value),
            "confidence": _num(c.confidence), "n_before": c.n_before, "n_after": c.n_after, "exact": c.exact,
            "paired": c.paired}


def _a(word: str) -> str:
    return ("an " if word[:1] in "aeiou" else "a ") + word


def _step(phase: str, lo: int, hi: int, mid: int | None, r_lo: Comparison, r_hi: Comparison | None, why: str,
          stage: str = "hunt") -> dict:
    """One decision for the report (``stage``: "hunt", or "opposing" while a move the other way is isolated)."""
    def brief(c: Comparison | None) -> dict | None:
        if c is None:
            return None
        return {"verdict": c.verdict.value, "kind": c.kind.value, "rel_change": _num(c.rel_change), "p_value": _num(c.p_value),
                "n": [c.n_before, c.n_after], "paired": c.paired}

    return {"phase": phase, "lo": lo, "hi": hi, "mid": mid, "lo_mid": brief(r_lo), "mid_hi": brief(r_hi), "why": why,
            "stage": stage}


def change_text(rel: float | None, places: int = 3) -> str:
    """A relative change for people: ``+1.600%``, or ``from zero`` when the old value was 0 (the
    ratio is infinite; ``rel`` None is how the JSON documents carry it)."""
    return f"{rel:+.{places}%}" if rel is not None and math.isfinite(rel) else "from zero"


def _pct_text(move: Mapping) -> str:
    """A move's ``change_pct`` (None: from zero) for people."""
    return change_text(None if move["change_pct"] is None else move["change_pct"] / 100.0)


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


Sampler = Callable[[int, int, bool], "Sequence[float] | Sampled | None"]


def run(bisection: Bisection, sample: Sampler, on_step: Callable[[Measure], None] | None = None) -> Outcome:
    """Drive a bisection synchronously. ``sample(index, count, fresh)`` measures ``count`` more
    repetitions of commit ``index`` and returns them (a :class:`Sampled` when they were measured
    interleaved with another commit's), or None when the commit does not build."""
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
            elif isinstance(values, Sampled):
                bisection.record(index, values.values, fresh=step.fresh, session=values.session)
            else:
                bisection.record(index, values, fresh=step.fresh)
