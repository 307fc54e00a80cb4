"""Where a change is: pinned to one commit by the repetitions, or a range of commits."""

from __future__ import annotations

import numpy as np

from perfci_core import metrics as catalogue

from ..changepoints import ChangePoint
from ..compare import Comparison, Kind, Verdict, compare
from ..series import CleanSeries
from .findings import Change
from .settings import Settings


def pin(s: CleanSeries, a: int, k: int, b: int, m: catalogue.Metric | None, min_effect: float,
        settings: Settings) -> tuple[Comparison, bool]:
    """The per-commit test of ``k`` on the repetitions (``pin_commits`` each side, within
    [a, b)): pinned when ``k`` differs from the repetitions before it and ``k - 1`` from those
    from ``k`` on, the same way."""
    p = settings.pin_commits
    before = s.pooled(max(a, k - p), k)
    check = compare(before, s.samples[k], m, alpha=settings.commit_alpha, min_effect=min_effect)
    if check.verdict is not Verdict.DIFFERENT:
        return check, False
    after = s.pooled(k, min(b, k + p))
    back = compare(s.samples[k - 1], after, m, alpha=settings.commit_alpha, min_effect=min_effect)
    same_sign = np.sign(back.rel_change) == np.sign(check.rel_change)
    return check, bool(back.verdict is Verdict.DIFFERENT and same_sign)


def change_at(s: CleanSeries, cp: ChangePoint, name: str, be: catalogue.Backend, check: Comparison | None,
              pinned: bool, widen: int = 1, confirmed: bool = False) -> Change:
    """The change of ``cp``: at its commit when pinned, else its range (``range_start`` ..
    ``range_end`` first-bad candidates) ``widen`` commits wider each way (the profile's range:
    noise is rarely as Gaussian as modelled)."""
    if pinned:
        lo = hi = cp.index
    else:
        lo, hi = max(1, cp.range_start - widen), min(len(s) - 1, cp.range_end + widen)
    t = cp.test
    kind = t.kind if t.kind is not Kind.NONE else Kind.CHANGE
    return Change(
        kind=kind, metric=name, backend=be.value, index=s.positions[cp.index], suspect=s.commits[cp.index],
        last_good=s.commits[lo - 1], first_bad=s.commits[hi], candidates=s.commits[lo:hi + 1],
        pinned=lo == hi, before_median=t.before_median, after_median=t.after_median,
        rel_change=t.rel_change, p_value=t.p_value, confidence=t.confidence,
        min_effect=t.min_effect, exact=t.exact, commit_check=check, confirmed=confirmed,
    )
