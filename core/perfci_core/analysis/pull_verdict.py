"""A pull request's verdict on one machine: every metric of every config over the head's interleaved
sessions so far, at one level for the whole pull request (docs/forges.md, "The verdict on a pull
request").

- Looks: session ``look`` of at most ``looks`` tests at its share of alpha (Pocock-type spending,
  :mod:`.sequential`), so the sessions together spend alpha once.
- One level over the metrics: the metrics perfci alerts on, on the noisy backends, are one family;
  Holm's step-down keeps the chance that any of them is called DIFFERENT for an unchanged head at
  the look's level, whatever their dependence (``share``: the part of it one config's family gets).
  A regression among them fails the pull request; the other metrics are reported, never failing.
- An answer for an unchanged head: a metric not called DIFFERENT is **unchanged** when two one-sided
  tests show its change within +/- its margin (the minimum effect learned from the base branch, at
  least ``equivalence``), each at the look's level; else it stays **undecided** and the head may get
  another session. Unchanged needs every metric to show it (an intersection-union test: no
  correction across metrics).
- ``sim`` decides by the exact-change rule: one session, no statistics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
# scipy (about a second to import) is imported by the functions that use it: the API, the agent and
# the CLI import this module for its types and rules, most of them never for a test.

from perfci_core import metrics as catalogue

from .compare import DEFAULT_ALPHA, Comparison, Kind, Verdict, compare
from .paired import equivalent, paired_compare
from .sequential import look_alpha

Call = Literal["regression", "improvement", "unchanged", "undecided"]


@dataclass(frozen=True)
class MetricSessions:
    """One metric of one config: base and head over every session so far (side by side when the
    sessions were interleaved), and the minimum effect learned for it."""

    config: str
    metric: str
    backend: str
    base: np.ndarray
    head: np.ndarray
    paired: bool
    min_effect: float

    @property
    def alerts(self) -> bool:
        """In the family that can fail a pull request: a metric perfci alerts on, on a noisy backend."""
        known = catalogue.CATALOGUE.get(self.metric)
        return known is not None and known.alerts and self.backend != catalogue.Backend.SIM.value


@dataclass(frozen=True)
class MetricVerdict:
    sessions: MetricSessions
    test: Comparison  # the difference test, at the level it was judged at
    call: Call
    level: float  # that level (Holm's for the family)
    margin: float  # the equivalence margin (relative): "unchanged within +/- margin"


def look_level(look: int, looks: int, alpha: float = DEFAULT_ALPHA) -> float:
    """The alpha of the ``look``-th session's tests (1-based) when a head may take ``looks``."""
    return look_alpha(alpha, min(max(look, 1), looks), looks)


def verdicts(metrics: Sequence[MetricSessions], look: int, looks: int, share: float = 1.0, equivalence: float = 0.0,
             alpha: float = DEFAULT_ALPHA) -> list[MetricVerdict]:
    """Each metric's call at ``look`` of ``looks`` (module doc), in the order given."""
    level = look_level(look, looks, alpha) * share
    family = [i for i, m in enumerate(metrics) if m.alerts]
    holm = _holm([metrics[i] for i in family], level)
    out = []
    for i, m in enumerate(metrics):
        at = holm[family.index(i)] if i in family else level
        margin = max(m.min_effect, equivalence)
        if m.backend == catalogue.Backend.SIM.value:
            test = compare(m.base, m.head, m.metric, backend=m.backend)
            call: Call = _moved(test) or "unchanged"
            out.append(MetricVerdict(m, test, call, 0.0, test.min_effect))
            continue
        test = _difference(m, at)
        call = _moved(test) or ("unchanged" if _equivalent(m, margin, level) else "undecided")
        out.append(MetricVerdict(m, test, call, at, margin))
    return out


def _moved(test: Comparison) -> Call | None:
    if test.verdict is not Verdict.DIFFERENT:
        return None
    return "regression" if test.kind is Kind.REGRESSION else "improvement"


def _difference(m: MetricSessions, alpha: float) -> Comparison:
    if m.paired:
        return paired_compare(m.base, m.head, m.metric, backend=m.backend, alpha=alpha, min_effect=m.min_effect)
    return compare(m.base, m.head, m.metric, backend=m.backend, alpha=alpha, min_effect=m.min_effect)


def _holm(family: Sequence[MetricSessions], level: float) -> list[float]:
    """Each family member's level under Holm's step-down at ``level``: the smallest p against
    ``level / m``, the next against ``level / (m - 1)``, ...; from the first that fails on, every
    one is held at a level it cannot pass (its own p halved)."""
    if not family:
        return []
    ps = [_p(m) for m in family]
    out = [0.0] * len(family)
    failed = False
    for rank, i in enumerate(np.argsort(ps, kind="stable")):
        step = level / (len(family) - rank)
        failed = failed or ps[i] > step
        out[i] = ps[i] / 2.0 if failed else step
    return out


def _p(m: MetricSessions) -> float:
    """The difference test's p-value."""
    if m.paired:
        return paired_compare(m.base, m.head, m.metric, backend=m.backend).p_value
    return compare(m.base, m.head, m.metric, backend=m.backend).p_value


def _equivalent(m: MetricSessions, margin: float, alpha: float) -> bool:
    if m.paired:
        return equivalent(m.base, m.head, margin, alpha, m.metric)
    # two samples: each side of the shifted logs against the base, one-sided Mann-Whitney (two one-sided tests)
    a, b = np.asarray(m.base, dtype=float), np.asarray(m.head, dtype=float)
    a, b = a[np.isfinite(a) & (a > 0)], b[np.isfinite(b) & (b > 0)]
    if a.size < 2 or b.size < 2:
        return False
    la, lb = np.log(a), np.log(b)
    from scipy import stats
    upper = stats.mannwhitneyu(lb - np.log1p(margin), la, alternative="less").pvalue
    lower = stats.mannwhitneyu(lb - np.log1p(-min(margin, 0.99)), la, alternative="greater").pvalue
    return bool(upper <= alpha and lower <= alpha)
