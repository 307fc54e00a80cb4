"""What detection reports about one series: changes (alerts), suspects (confirmation to measure)
and creeps (a slow move over a range that no single commit caused)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..compare import Comparison, Kind


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
    confidence: float  # 1 - p_value: a strength to sort by, not a probability the change is real
    min_effect: float
    exact: bool  # decided by the exact-change rule (sim)
    commit_check: Comparison | None = None  # suspect's repetitions vs the ones just before
    confirmed: bool = False  # a suspect confirmed by its bracket's interleaved sessions, not by the search

    @property
    def percent(self) -> float:
        return 100.0 * self.rel_change


@dataclass(frozen=True)
class Suspect:
    """What detection asks to measure next for one series. Two kinds:

    - ``unconfirmed``: a likely change the commits' own measurements cannot decide; ``commits`` is
      its bracket (a commit before its located range and one after it), measured interleaved in one
      confirmation session per look (``looks``: the sessions so far);
    - ``unpinned``: a change found at a range of commits; ``commits`` are those around it whose
      rounds (one more job of each, which joins its own measurements) locate it."""

    why: Literal["unconfirmed", "unpinned"]
    kind: Kind  # direction the data leans to (CHANGE for a metric of unknown direction)
    metric: str
    backend: str
    suspect: str  # most likely first commit at the new level
    commits: tuple[str, ...]  # the bracket (unconfirmed) or the commits to re-measure (unpinned), in series order
    rel_change: float
    p_value: float
    looks: int = 0  # confirmation sessions of the bracket measured so far

    @property
    def percent(self) -> float:
        return 100.0 * self.rel_change


@dataclass(frozen=True)
class Creep:
    """A level that moved gradually from ``first`` to ``last`` (a ramp), with no single commit
    to blame: a host aging, a cache filling, many small commits."""

    kind: Kind
    metric: str
    backend: str
    start: int  # positions in the series as passed in (dropped points counted)
    end: int
    first: str  # the first commit of the ramp and its last
    last: str
    rel_change: float  # the ramp's whole move
    p_value: float  # the trend test over the ramp's commits, steps taken out

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
    creeps: tuple[Creep, ...] = ()

    @property
    def regressions(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.kind is Kind.REGRESSION)

    @property
    def improvements(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.kind is Kind.IMPROVEMENT)
