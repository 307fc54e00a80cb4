"""Detection that stays cheap as points are appended one at a time, and as the server re-detects
a sliding window after every upload (docs/design.md, "Deciding a regression": incremental).

Two rules make most of the main search reusable from one detection to the next without changing a
verdict: a window starts at a multiple of ``Settings.block`` positions (:func:`.detection.window_start`),
so its start moves a block at a time; and the main search's frame (noise, typical repetitions,
penalty) is learned on the points before the newest block (:func:`.detection.learned_part`), so it
stays the same while a block fills. A :class:`..changepoints.SearchMemo` passed to ``detect`` then
searches on from the longest prefix whose inputs are unchanged."""

from __future__ import annotations

from bisect import bisect_left
from typing import Iterable

import numpy as np

from perfci_core import metrics as catalogue

from ..changepoints import SearchMemo
from ..series import CleanSeries, Point, clean
from .detection import detect, window_start
from .findings import Change, DetectionResult
from .settings import Settings


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
                                       fresh.suspects, fresh.creeps)
        return self._result
