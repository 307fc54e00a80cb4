"""Series input: commit-ordered points with every repetition, cleaned once.

A *series* is one machine fingerprint x benchmark config x metric x backend x branch in commit
order. Each :class:`Point` is a commit id and the repetition values measured at it (any count,
possibly one, possibly none). :func:`clean` is the only place where bad input is handled:

- NaN and +/-inf repetitions are dropped, with a note naming the commit;
- a point left with no repetition is dropped (a missing measurement, not a zero), with a note;
- everything else is kept exactly, in order, each point remembering its position in the input
  (:attr:`CleanSeries.positions`), so results can name the position the caller passed in.

A point may say which of its repetitions came from which job (:attr:`Point.runs`, the repetition
count of each job in order). The repetitions of one job share the host's state at that moment, so
they are not independent samples of the commit; the jobs are (:meth:`CleanSeries.run_medians`,
:meth:`CleanSeries.run_best`).
Without it a point is one job. A job may also name the confirmation session it belongs to
(:attr:`Point.pairs`): two jobs of two commits with the same key were measured A B A B ... in
one session, their i-th repetitions side by side (:meth:`CleanSeries.sessions`). Such a job
confirms a suspect; it is not part of its commit's own level (:meth:`CleanSeries.own`).

It also fixes the *scale* the change-point search works on (:func:`to_scale`): the natural log of
the per-commit medians when every value is positive (steps become additive and symmetric, a
+5 % and a -5 % step weigh the same), otherwise the values divided by their median magnitude.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Iterable, Sequence

import numpy as np

from perfci_core import metrics as catalogue


@dataclass(frozen=True)
class Point:
    """One measured commit: its id and every repetition value (in the metric's unit)."""

    commit: str
    values: tuple[float, ...]
    runs: tuple[int, ...] = ()  # repetitions of each job, in order (sum = len(values)); () = one job
    # Per job (parallel to ``runs``), the key of the confirmation session it was part of; 0 = none.
    pairs: tuple[int, ...] = ()

    @classmethod
    def of(cls, commit: str, values: float | Iterable[float], runs: Iterable[int] = (),
           pairs: Iterable[int] = ()) -> Point:
        sizes, keys = tuple(int(r) for r in runs), tuple(int(k) for k in pairs)
        if isinstance(values, (int, float)):
            return cls(commit, (float(values),), sizes, keys)
        return cls(commit, tuple(float(v) for v in values), sizes, keys)


@dataclass(frozen=True)
class CleanSeries:
    """A series after :func:`clean`: finite repetitions only, no empty points."""

    commits: tuple[str, ...]
    samples: tuple[np.ndarray, ...]
    notes: tuple[str, ...] = field(default=())
    positions: tuple[int, ...] = ()  # each point's index in the input series (default: 0, 1, ...)
    runs: tuple[tuple[int, ...], ...] = ()  # per point, its jobs' repetition counts (default: one job)
    pairs: tuple[tuple[int, ...], ...] = ()  # per point, its jobs' confirmation-session keys (0: none)

    def __post_init__(self) -> None:
        if not self.positions:
            object.__setattr__(self, "positions", tuple(range(len(self.commits))))
        elif len(self.positions) != len(self.commits):
            raise ValueError("positions and commits differ in length")
        if self.runs and len(self.runs) != len(self.commits):
            raise ValueError("runs and commits differ in length")
        if self.pairs and (len(self.pairs) != len(self.commits)
                           or any(len(k) != len(self.runs[i] if self.runs else (0,)) for i, k in enumerate(self.pairs))):
            raise ValueError("pair keys must name each job of each point")

    def __len__(self) -> int:
        return len(self.commits)

    @cached_property
    def medians(self) -> np.ndarray:
        """Per-point medians, computed once (detection reads them several times)."""
        return medians_of(self.samples)

    @property
    def counts(self) -> np.ndarray:
        return np.array([len(s) for s in self.samples], dtype=float)

    def run_medians(self, start: int, stop: int) -> np.ndarray:
        """The median of every job of points ``start`` .. ``stop - 1``: one independent value per
        job (a point without job counts is one job)."""
        out: list[np.ndarray] = []
        for i in range(start, stop):
            sizes = self.runs[i] if self.runs else ()
            out.append(self.medians[i:i + 1] if len(sizes) <= 1 else medians_of(self.jobs(i)))
        return np.concatenate(out) if out else np.empty(0)

    def jobs(self, i: int) -> list[np.ndarray]:
        """The repetitions of point ``i``, one array per job."""
        sizes = self.runs[i] if self.runs else ()
        return np.split(self.samples[i], np.cumsum(sizes)[:-1]) if len(sizes) > 1 else [self.samples[i]]

    def job_counts(self) -> np.ndarray:
        return np.array([len(r) for r in self.runs] if self.runs else [1] * len(self), dtype=float)

    def run_best(self, start: int, stop: int, lower_is_better: bool) -> np.ndarray:
        """The best repetition of every job of points ``start`` .. ``stop - 1`` (the lowest when
        lower is better): one value per job that the host's interference barely touches, since
        interference only ever makes a run worse (the heavy upper tail in docs/design.md, "These machines"; in the
        recording of benchmarks/detection/data a quarter of the ``tsc`` runs are 10-75 % slow, none
        is fast)."""
        pick = np.min if lower_is_better else np.max
        return np.asarray([float(pick(x)) for i in range(start, stop) for x in self.jobs(i)], dtype=float)

    def bests(self, lower_is_better: bool) -> np.ndarray:
        """Per point, the median of its jobs' best repetitions (:meth:`run_best`): a value that
        does not drift with how many jobs a point had, as the best of all its repetitions would."""
        cache = self.__dict__.setdefault("_bests", {})
        if lower_is_better not in cache:
            single = [i for i in range(len(self)) if not self.runs or len(self.runs[i]) <= 1]
            out = np.empty(len(self))
            out[single] = reduce_each([self.samples[i] for i in single], np.min if lower_is_better else np.max)
            for i in sorted(set(range(len(self))) - set(single)):
                out[i] = float(np.median(self.run_best(i, i + 1, lower_is_better)))
            cache[lower_is_better] = out
        return cache[lower_is_better]

    def own(self) -> CleanSeries:
        """Each point with its own jobs only, the confirmation sessions' jobs left out (a point that
        has nothing else is dropped). The series itself when no job belongs to a session."""
        if not self.pairs:
            return self
        keep, samples, runs = [], [], []
        for i in range(len(self)):
            jobs = [x for x, k in zip(self.jobs(i), self.pairs[i]) if not k]
            if jobs:
                keep.append(i)
                samples.append(np.concatenate(jobs))
                runs.append(tuple(x.size for x in jobs))
        with_jobs = any(len(r) > 1 for r in runs)
        return CleanSeries(tuple(self.commits[i] for i in keep), tuple(samples), self.notes,
                           tuple(self.positions[i] for i in keep), tuple(runs) if with_jobs else ())

    def sessions(self) -> dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray]]]:
        """Every confirmation session, by the two points it measured (earlier, later): each
        session's repetitions of the two, side by side (the i-th of each one pair), in the order of
        their keys (the order they were measured in). A session whose sides differ in size is left
        out: a side lost repetitions, so its order no longer matches the other's."""
        if not self.pairs:
            return {}
        where: dict[int, list[tuple[int, np.ndarray]]] = {}
        for i in range(len(self)):
            for k, x in zip(self.pairs[i], self.jobs(i)):
                if k:
                    where.setdefault(k, []).append((i, x))
        out: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray]]] = {}
        for k in sorted(where):
            sides = where[k]
            if len(sides) == 2 and sides[0][0] != sides[1][0] and sides[0][1].size == sides[1][1].size:
                (a, x), (b, y) = sorted(sides, key=lambda side: side[0])
                out.setdefault((a, b), []).append((x, y))
        return out

    def pooled(self, start: int, stop: int) -> np.ndarray:
        """Every repetition of points ``start`` .. ``stop - 1``."""
        if stop <= start:
            return np.empty(0)
        return np.concatenate(self.samples[start:stop])


def medians_of(samples: Sequence[np.ndarray]) -> np.ndarray:
    """The median of each non-empty array (:func:`reduce_each`)."""
    return reduce_each(samples, np.median)


def reduce_each(samples: Sequence[np.ndarray], reduce: Callable[..., np.ndarray]) -> np.ndarray:
    """``reduce`` (np.median, np.min, ...) of each non-empty array, as one call over a 2-D array
    per size instead of one call per array (bit-identical, and the per-call overhead is most of a
    small array's cost)."""
    out = np.empty(len(samples))
    by_size: dict[int, list[int]] = {}
    for i, x in enumerate(samples):
        by_size.setdefault(x.size, []).append(i)
    for idx in by_size.values():
        out[idx] = reduce(np.stack([samples[i] for i in idx]), axis=1)
    return out


def clean(points: Sequence[Point | tuple[str, float | Iterable[float]]]) -> CleanSeries:
    """Drop non-finite repetitions and empty points, noting each; keep the commit order.

    Job counts that do not add up to a point's repetitions are a caller's error (ValueError). A
    session's job that loses a repetition keeps its key (it is still not the commit's own), and
    :meth:`CleanSeries.sessions` leaves it out: its order no longer matches its partner's."""
    commits: list[str] = []
    samples: list[np.ndarray] = []
    positions: list[int] = []
    runs: list[tuple[int, ...]] = []
    keys: list[tuple[int, ...]] = []
    notes: list[str] = []
    for position, raw in enumerate(points):
        p = raw if isinstance(raw, Point) else Point.of(*raw)
        arr = np.asarray(p.values, dtype=float)
        sizes = p.runs or (arr.size,)
        if sum(sizes) != arr.size or min(sizes) < 0:
            raise ValueError(f"{p.commit}: job repetition counts {list(p.runs)} do not add up to {arr.size} values")
        pair = p.pairs or (0,) * len(sizes)
        if len(pair) != len(sizes):
            raise ValueError(f"{p.commit}: {len(pair)} pair key(s) for {len(sizes)} job(s)")
        finite = np.isfinite(arr)
        if not finite.all():
            notes.append(f"{p.commit}: dropped {int((~finite).sum())} non-finite repetition(s)")
            sizes, arr = tuple(int(part.sum()) for part in np.split(finite, np.cumsum(sizes)[:-1])), arr[finite]
        if arr.size == 0:
            notes.append(f"{p.commit}: no usable repetition, point skipped")
            continue
        commits.append(p.commit)
        samples.append(arr)
        positions.append(position)
        runs.append(tuple(n for n in sizes if n))
        keys.append(tuple(k for k, n in zip(pair, sizes) if n))
    with_jobs = any(len(r) > 1 for r in runs) or any(any(k) for k in keys)
    with_pairs = any(any(k) for k in keys)
    return CleanSeries(tuple(commits), tuple(samples), tuple(notes), tuple(positions),
                       tuple(runs) if with_jobs else (), tuple(keys) if with_pairs else ())


def to_scale(medians: np.ndarray) -> np.ndarray:
    """Per-commit medians on the scale the change-point search uses (log, or median-normalised).

    On the log scale a difference d is a relative change of exp(d) - 1 (~ d for small d).
    """
    m = np.asarray(medians, dtype=float)
    if m.size and np.all(m > 0):
        return np.log(m)
    ref = float(np.median(np.abs(m))) if m.size else 0.0
    if ref == 0.0:
        ref = float(np.max(np.abs(m))) if m.size and np.max(np.abs(m)) > 0 else 1.0
    return m / ref


def relative_change(before: float, after: float) -> float:
    """(after - before) / |before|; 0 when both are 0, +/-inf when only ``before`` is 0."""
    if before == 0.0:
        if after == 0.0:
            return 0.0
        return math.copysign(math.inf, after)
    return (after - before) / abs(before)


def resolve_metric(metric: str | catalogue.Metric) -> catalogue.Metric:
    """The catalogue entry (KeyError naming the known metrics when unknown), or a given Metric."""
    if isinstance(metric, catalogue.Metric):
        return metric
    return catalogue.get(metric)
