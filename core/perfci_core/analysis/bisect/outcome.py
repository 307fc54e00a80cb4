"""A bisection's outcome and its stored state, and how comparisons are written for people and JSON."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal, Mapping

from ..compare import Comparison, Kind
from .policy import Phase, Status

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


def comparison_dict(c: Comparison | None) -> dict | None:
    """A comparison as plain JSON-able data (reports, the server's stored result)."""
    if c is None:
        return None
    return {"verdict": c.verdict.value, "kind": c.kind.value, "before_median": finite_or_none(c.before_median),
            "after_median": finite_or_none(c.after_median), "change_pct": finite_or_none(100.0 * c.rel_change), "p_value": finite_or_none(c.p_value),
            "confidence": finite_or_none(c.confidence), "n_before": c.n_before, "n_after": c.n_after, "exact": c.exact,
            "paired": c.paired}


def with_article(word: str) -> str:
    return ("an " if word[:1] in "aeiou" else "a ") + word


def step_record(phase: str, lo: int, hi: int, mid: int | None, r_lo: Comparison, r_hi: Comparison | None, why: str,
          stage: str = "hunt") -> dict:
    """One decision for the report (``stage``: "hunt", or "opposing" while a move the other way is isolated)."""
    def brief(c: Comparison | None) -> dict | None:
        if c is None:
            return None
        return {"verdict": c.verdict.value, "kind": c.kind.value, "rel_change": finite_or_none(c.rel_change), "p_value": finite_or_none(c.p_value),
                "n": [c.n_before, c.n_after], "paired": c.paired}

    return {"phase": phase, "lo": lo, "hi": hi, "mid": mid, "lo_mid": brief(r_lo), "mid_hi": brief(r_hi), "why": why,
            "stage": stage}


def change_text(rel: float | None, places: int = 3) -> str:
    """A relative change for people: ``+1.600%``, or ``from zero`` when the old value was 0 (the
    ratio is infinite; ``rel`` None is how the JSON documents carry it)."""
    return f"{rel:+.{places}%}" if rel is not None and math.isfinite(rel) else "from zero"


def move_text(move: Mapping) -> str:
    """A move's ``change_pct`` (None: from zero) for people."""
    return change_text(None if move["change_pct"] is None else move["change_pct"] / 100.0)


def finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None
