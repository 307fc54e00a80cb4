"""A bisection's policy (repetitions, levels, what is hunted) and what it records per commit."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal, Sequence

import numpy as np

from perfci_core import metrics as catalogue

from ..compare import DEFAULT_ALPHA, DEFAULT_TOLERANCE
from ..paired import pairs_needed
from ..sequential import SPENDING, Spending, look_alpha

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
        """What an interleaved session of a step takes at least: the fewest pairs whose paired test
        can reach the share of alpha of the look they make (8 at alpha = 0.01 without spending, 11
        with ``pocock``), and room for one pair in five left out as a burst (``burst_pairs`` leaves
        out about 4 % of the pairs of plain normal noise): 10 and 14."""
        for n in range(1, self.max_reps + 1):
            if pairs_needed(self.look_alpha(n)) <= n:
                return n + math.ceil(n / 5)
        n = pairs_needed(self.look_alpha(self.max_reps))
        return n + math.ceil(n / 5)

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
