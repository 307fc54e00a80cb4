"""Incremental detection (analysis.detect, module doc): the main search kept between detections
proposes exactly what a search from scratch proposes, and it is kept for most points when a
window slides a block at a time."""

from __future__ import annotations

import numpy as np

from perfci_core.analysis import Settings, detect
from perfci_core.analysis.changepoints import SearchMemo, Segmenter, segment
from perfci_core.analysis.detect import learned_part, window_start
from perfci_core.analysis.series import Point

from .synth import levels, noisy, search_case


def _state(seg: Segmenter) -> tuple:
    return seg.bounds(), seg.best.tolist(), seg.last.tolist()


def test_a_search_extended_in_pieces_and_cut_back_is_the_search_in_one_pass():
    rng = np.random.default_rng(5)
    for _ in range(60):
        y, w, L, pen = search_case(rng, 160)
        n = y.size
        whole = Segmenter(pen, L).extend(y, w)
        assert whole.bounds() == segment(y, w, pen, L)
        pieces, done = Segmenter(pen, L), 0
        while done < n:
            step = int(rng.integers(1, 12))
            pieces.extend(y[done:done + step], w[done:done + step])
            done = len(pieces)
            if rng.random() < 0.3:  # cut back (a re-measured point) and search on again
                pieces.truncate(int(rng.integers(0, done + 1)))
                done = len(pieces)
        assert _state(pieces) == _state(whole)
        # a prefix searched alone, then the rest: the same grouping of the whole
        k = int(rng.integers(0, n + 1))
        assert _state(Segmenter(pen, L).extend(y[:k], w[:k]).extend(y[k:], w[k:])) == _state(whole)


def test_a_memo_searches_only_what_changed():
    rng = np.random.default_rng(6)
    y, w = rng.normal(0, 1, 120), np.ones(120)
    memo = SearchMemo()
    assert memo.search(y[:100], w[:100], 8.0, 3) == segment(y[:100], w[:100], 8.0, 3)
    assert (memo.reused, memo.searched) == (0, 100)
    assert memo.search(y[:103], w[:103], 8.0, 3) == segment(y[:103], w[:103], 8.0, 3)
    assert (memo.reused, memo.searched) == (100, 103)  # only the 3 new points
    changed = y[:103].copy()
    changed[90] += 5.0  # a re-measured commit: searched again from there
    assert memo.search(changed, w[:103], 8.0, 3) == segment(changed, w[:103], 8.0, 3)
    assert (memo.reused, memo.searched) == (190, 116)
    heavier = w[:103].copy()
    heavier[95] = 4.0  # more repetitions of one commit, the same median: searched again from there
    assert memo.search(changed, heavier, 8.0, 3) == segment(changed, heavier, 8.0, 3)
    assert (memo.reused, memo.searched) == (285, 124)
    assert memo.search(changed, heavier, 9.0, 3) == segment(changed, heavier, 9.0, 3)  # another penalty: all again
    assert (memo.reused, memo.searched) == (285, 227)


def test_windows_start_at_block_edges_and_learn_before_the_newest_block():
    assert [window_start(p, 25) for p in (0, 1, 24, 25, 26, 201)] == [0, 25, 25, 25, 50, 225]
    assert window_start(7, 0) == 7
    assert learned_part(list(range(99)), 25) == 99  # fewer than four blocks before the newest: every point
    assert learned_part(list(range(100)), 25) == 100
    assert learned_part(list(range(101)), 25) == 100
    assert learned_part(list(range(124)), 25) == 100
    assert learned_part(list(range(125)), 25) == 100  # the point at 124 is the last of the block 100..124
    assert learned_part(list(range(126)), 25) == 125
    assert learned_part(list(range(50, 250)), 25) == 175  # a window of 200 from 50: positions 50..224
    assert learned_part([0, 10, 30, 200], 25) == 4  # few points: every one
    assert learned_part(list(range(10)), 0) == 10


def _walk(points: list[tuple[str, np.ndarray]], size: int, settings: Settings, remeasure: dict[int, int],
          rng: np.random.Generator) -> tuple[SearchMemo, int]:
    """The server's walk: after each new commit, detection over the newest ``size`` commits from
    a block edge, with and without the memo; commit ``k`` gets a second job when the walk reaches
    ``remeasure[k]``. Returns the memo and the detections whose results were compared."""
    memo, compared = SearchMemo(), 0
    values = [list(v) for _, v in points]
    jobs = [[len(v)] for _, v in points]
    for t in range(1, len(points) + 1):
        for k, at in remeasure.items():
            if at == t:
                extra = list(points[k][1] * (1.0 + 0.01 * rng.standard_normal(len(points[k][1]))))
                values[k] += extra
                jobs[k].append(len(extra))
        start = window_start(t - size, settings.block) if t > size else 0
        series = [Point.of(points[i][0], values[i], jobs[i]) for i in range(start, t)]
        assert detect(series, "cpp", "tsc", settings, memo) == detect(series, "cpp", "tsc", settings)
        compared += 1
    return memo, compared


def test_detection_with_a_memo_is_detection_without_one():
    """Steps, heavy-tailed noise, outliers, re-measured commits (old and new) and a window that
    slides past its size: every detection with the memo equals the one from scratch, and the memo
    keeps most of the search."""
    rng = np.random.default_rng(12)
    points = noisy(levels(330, {60: 0.04, 170: -0.03, 260: 0.05}), rng, "heavy", 0.01, 5)
    points[120] = (points[120][0], points[120][1] * 1.3)  # an outlier commit
    memo, compared = _walk(points, 200, Settings(), {50: 240, 200: 203, 300: 310}, rng)
    assert compared == 330
    assert memo.reused > 0.8 * (memo.reused + memo.searched)
    # the same walk detects the steps (the memo does not hide them)
    final = detect(points[window_start(130, 25):], "cpp", "tsc")
    assert [c.index for c in final.changes] == [170 - 150, 260 - 150]
