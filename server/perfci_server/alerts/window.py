"""The measured window of one branch x machine x config, kept between detections.

Detection analyses each series over its last ``detection_window_commits`` measured commits. The
window's content only changes where runs arrive (and at its left edge, where commits slide out),
so instead of re-reading every repetition of every metric of those commits on each task, the
window detection last analysed is stored (table ``detection_windows``) and the next detection
reads only the commits that have runs still awaiting detection.

The cache can never change a verdict:

- it is written in the transaction that marks the runs detected, so it is never ahead of
  ``runs.detected_at`` (a lost worker or a database restart rolls both back);
- it is used only when it agrees with the tables: same detector settings and window size
  (``version``), and every measured (position, commit) of the current window that has no run
  awaiting detection is in it with the same commit. Anything else (a force-push renumbered the
  branch, a job was deleted, another version wrote it) rebuilds the window from the tables;
- a commit with any run awaiting detection (this task's or another's) is re-read whole, so a
  re-measured commit gets its new repetitions.

Points are cleaned as :func:`perfci_core.analysis.series.clean` does (non-finite repetitions
dropped, empty points skipped) and each point's median is computed once, when it enters. A point
measured by several runs keeps each run's repetition count. A confirmation session's run keeps the
session's key (``window_runs``' ``pair``): detection pairs its repetitions with the partner's and
leaves them out of the commit's own level.

Decoding the stored window is most of what reading it costs, and a worker usually reads back the
window it wrote itself: :func:`decode` hands back the object that produced exactly these bytes
(keyed by their digest, in this process) and decodes only when it has none. That object also
carries each series' main search (``Window.memos``), which the next detection searches on from.
What the database holds stays the only truth: different bytes (another worker wrote them, a
rollback kept older ones) miss and are decoded.
"""

from __future__ import annotations

import hashlib
import io
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

import numpy as np

from perfci_core.analysis.changepoints import SearchMemo
from perfci_core.analysis.series import CleanSeries, medians_of

FORMAT = 5  # bump when the stored layout changes (3: each point's jobs; 4: their session keys; 5: confirmation sessions only)
DECODED_KEPT = 64  # windows a process keeps decoded (one per branch x machine x config it detects)

Key = tuple[str, str]  # (metric, backend)


def version_of(detector: Any, size: int) -> str:
    """Cache key of the analysis: a window written under other settings is not reused."""
    return hashlib.sha256(f"{FORMAT}|{size}|{detector!r}".encode()).hexdigest()[:64]


@dataclass(frozen=True)
class WindowSeries(CleanSeries):
    """A window's series with the per-commit medians computed when each point entered (the
    analysis asks for them several times; they are the bulk of its cost otherwise)."""

    cached_medians: np.ndarray = field(default_factory=lambda: np.empty(0))

    @property
    def medians(self) -> np.ndarray:
        return self.cached_medians


@dataclass
class Point:
    samples: np.ndarray
    median: float
    runs: tuple[int, ...] = ()  # repetitions of each job (run) in ``samples``, in run order; () = one job
    pairs: tuple[int, ...] = ()  # each job's confirmation-session key (0: the commit's own); () = none


@dataclass
class Window:
    """Measured commits (ascending branch positions) and every cleaned point of every series."""

    positions: list[int] = field(default_factory=list)
    commit_ids: dict[int, int] = field(default_factory=dict)  # position -> commit id
    shas: dict[int, str] = field(default_factory=dict)  # position -> sha
    points: dict[Key, dict[int, Point]] = field(default_factory=dict)  # key -> position -> point
    # Each series' main search at the last detection (analysis.detect: incremental). Not stored:
    # kept with the decoded window in this process only; a memo never changes a verdict.
    memos: dict[Key, SearchMemo] = field(default_factory=dict, repr=False, compare=False)

    # --- building -----------------------------------------------------------------------------

    def put_runs(self, rows: Iterable[Any], positions: Iterable[int]) -> None:
        """Replace every point at ``positions`` by ``rows`` (position, commit_id, sha, metric,
        backend, run_id, values, noisy, pair: series_repository.window_runs, one per run x metric x
        backend, a point's runs together) — all the values stored at those positions. A batch of
        uploads brings thousands of rows: one pass collects every value into one array, whose
        finiteness is checked at once, and the medians are taken together (series.medians_of)."""
        wanted = set(positions)
        for by_position in self.points.values():
            for position in wanted & by_position.keys():
                del by_position[position]
        rows = list(rows)
        flat: list[float] = []
        ends: list[int] = []
        commit_ids, shas = self.commit_ids, self.shas
        for position, commit_id, sha, _metric, _backend, _run_id, values, _noisy, _pair in rows:
            flat.extend(values)
            ends.append(len(flat))
            commit_ids[position], shas[position] = commit_id, sha
        everything = np.asarray(flat, dtype=float)
        finite = np.isfinite(everything)
        clean = bool(finite.all())
        kept: list[tuple[tuple[Key, int], np.ndarray, tuple[int, ...], tuple[int, ...]]] = []
        starts = [0, *ends[:-1]]
        by_point = groupby(zip(rows, starts, ends), key=lambda r: ((r[0][3], r[0][4]), r[0][0]))  # (metric, backend), position
        for point, runs in by_point:
            parts, keys = [], []
            for (_, _, _, _, _, _, _, noisy, pair), start, end in runs:
                arr = everything[start:end]
                if not clean and not finite[start:end].all():
                    arr = arr[finite[start:end]]  # a session side that lost one no longer pairs (CleanSeries.sessions)
                if noisy and arr.size > 1:
                    arr = _weighed(arr)
                if arr.size:
                    parts.append(arr)
                    keys.append(pair or 0)
            paired = tuple(keys) if any(keys) else ()
            if len(parts) == 1 and not paired:
                kept.append((point, parts[0], (), ()))  # one job, the usual case: no per-point object to keep
            elif parts:
                kept.append((point, np.concatenate(parts), tuple(a.size for a in parts), paired))
        medians = medians_of([arr for _, arr, _, _ in kept])
        for ((key, position), arr, sizes, paired), median in zip(kept, medians.tolist()):
            self.points.setdefault(key, {})[position] = Point(arr, median, sizes, paired)

    def slide_to(self, measured: Sequence[tuple[int, int]]) -> None:
        """Keep only the measured (position, commit id) pairs of the current window."""
        self.positions = [p for p, _ in measured]
        keep = set(self.positions)
        for position in list(self.commit_ids):
            if position not in keep:
                del self.commit_ids[position]
                self.shas.pop(position, None)
        for key in list(self.points):
            by_position = self.points[key]
            for position in [p for p in by_position if p not in keep]:
                del by_position[position]
            if not by_position:
                del self.points[key]
                self.memos.pop(key, None)
        for position, commit_id in measured:
            self.commit_ids.setdefault(position, commit_id)

    def agrees_with(self, measured: Sequence[tuple[int, int]], fresh: set[int]) -> bool:
        """True when every measured commit without a run awaiting detection (not in ``fresh``,
        positions) is in this window with the same commit, and nothing else is."""
        mine = self.commit_ids
        lo = measured[0][0] if measured else 0
        current = dict(measured)
        if any(p >= lo and p not in current for p in mine):
            return False  # a commit this window holds is no longer measured there
        return all(p in fresh or mine.get(p) == c for p, c in measured)

    # --- reading ------------------------------------------------------------------------------

    def series(self) -> dict[Key, WindowSeries]:
        """Each (metric, backend) with a point in the window, as the analysis takes it."""
        out = {}
        for key, by_position in sorted(self.points.items()):
            ordered = sorted(by_position)
            points = [by_position[p] for p in ordered]
            with_jobs = any(len(x.runs) > 1 or x.pairs for x in points)
            with_pairs = any(x.pairs for x in points)
            out[key] = WindowSeries(
                commits=tuple(self.shas[p] for p in ordered),
                samples=tuple(x.samples for x in points),
                runs=tuple(x.runs or (x.samples.size,) for x in points) if with_jobs else (),
                pairs=tuple(x.pairs or (0,) * max(1, len(x.runs)) for x in points) if with_pairs else (),
                cached_medians=np.array([x.median for x in points]),
            )
        return out

    def at(self) -> dict[str, tuple[int, int]]:
        """sha -> (commit id, position) of the measured commits with values."""
        return {self.shas[p]: (self.commit_ids[p], p) for p in self.shas}

    # --- storage ------------------------------------------------------------------------------

    def dumps(self) -> bytes:
        """numpy's npz (no pickle), a few flat arrays: the commits, then every point of every
        series one after the other (its series, position, repetition count, median, job count,
        values), and every point's job sizes and interleaved-session keys one after the other."""
        positions = sorted(self.commit_ids)
        keys = sorted(self.points)
        ordered = [(k, p) for k in keys for p in sorted(self.points[k])]
        points = [self.points[k][p] for k, p in ordered]
        buffer = io.BytesIO()
        np.savez(
            buffer,
            window=np.array(self.positions, dtype=np.int64),
            positions=np.array(positions, dtype=np.int64),
            commit_ids=np.array([self.commit_ids[p] for p in positions], dtype=np.int64),
            shas=np.array([self.shas.get(p, "").encode() for p in positions], dtype=bytes),  # 1 byte a character, not 4
            keys=np.array([f"{m}\t{b}".encode() for m, b in keys], dtype=bytes),
            point_key=np.repeat(np.arange(len(keys), dtype=np.int64), [len(self.points[k]) for k in keys]),
            point_position=np.array([p for _, p in ordered], dtype=np.int64),
            point_count=np.array([x.samples.size for x in points], dtype=np.int64),
            point_median=np.array([x.median for x in points], dtype=float),
            point_runs=np.array([len(x.runs) for x in points], dtype=np.int64),
            run_sizes=np.array([n for x in points for n in x.runs], dtype=np.int64),
            run_pairs=np.array([k for x in points for k in (x.pairs or (0,) * len(x.runs))], dtype=np.int64),
            values=np.concatenate([x.samples for x in points]) if points else np.empty(0),
        )
        return buffer.getvalue()

    @classmethod
    def loads(cls, data: bytes) -> Window:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {name: z[name] for name in z.files}
        window = cls(positions=arrays["window"].tolist())
        positions = arrays["positions"].tolist()
        window.commit_ids = dict(zip(positions, arrays["commit_ids"].tolist()))
        window.shas = {p: s.decode() for p, s in zip(positions, arrays["shas"].tolist()) if s}
        if not set(window.positions) <= window.commit_ids.keys():
            raise ValueError("a window position has no commit")
        keys = [tuple(k.decode().split("\t")) for k in arrays["keys"].tolist()]
        values, sizes, keys_of_runs = arrays["values"], arrays["run_sizes"].tolist(), arrays["run_pairs"].tolist()
        if len(keys_of_runs) != len(sizes):
            raise ValueError("interleaved-session keys do not match the jobs")
        ends = np.cumsum(arrays["point_count"]).tolist()
        start = first_run = 0
        for k, p, end, median, n_runs in zip(arrays["point_key"].tolist(), arrays["point_position"].tolist(), ends,
                                             arrays["point_median"].tolist(), arrays["point_runs"].tolist()):
            runs = tuple(sizes[first_run:first_run + n_runs])
            if runs and sum(runs) != end - start:
                raise ValueError("job sizes do not match a point's repetitions")
            paired = tuple(keys_of_runs[first_run:first_run + n_runs])
            window.points.setdefault(keys[k], {})[p] = Point(values[start:end], median, runs, paired if any(paired) else ())
            start, first_run = end, first_run + n_runs
        if start != values.size or first_run != len(sizes):
            raise ValueError("repetition counts do not match the values")
        return window


def _weighed(values: np.ndarray) -> np.ndarray:
    """A run the agent marked noisy counts as one repetition (its median), not all of them:
    detection then gives its commit the noise of a single run (a sqrt(n) wider band) and the
    per-commit test little to go on, so a host's bad moment is down-weighted rather than taken as
    the commit's level. Not dropped: a commit measured only while the host was busy still shows."""
    return np.asarray([float(np.median(values))])


_decoded: OrderedDict[bytes, Window] = OrderedDict()


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=20).digest()


def remember(data: bytes, window: Window) -> None:
    """``window`` is what ``data`` (its :meth:`Window.dumps`) decodes to: keep it for :func:`decode`."""
    key = _digest(data)
    _decoded[key] = window
    _decoded.move_to_end(key)
    while len(_decoded) > DECODED_KEPT:
        _decoded.popitem(last=False)


def decode(data: bytes) -> Window:
    """The window stored as ``data``: the object that wrote these bytes in this process (taken
    out: the caller updates it), else :meth:`Window.loads` (which raises on damaged data)."""
    window = _decoded.pop(_digest(data), None)
    return window if window is not None else Window.loads(data)
