"""Detection's settings: the search's levels, the suspects' search, confirmation and creeps
(docs/design.md, "Deciding a regression")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..changepoints import SearchSettings
from ..compare import DEFAULT_TOLERANCE


@dataclass(frozen=True)
class Settings:
    tolerance: float = DEFAULT_TOLERANCE  # sim: relative change that counts as a change
    min_change: float = 0.002  # floor of the minimum effect (0.2 %)
    noise_factor: float = 0.5  # minimum effect = max(min_change, noise_factor x per-commit noise)
    search: SearchSettings = field(default_factory=SearchSettings)
    pin_commits: int = 5  # commits of repetitions pooled on each side for the per-commit test
    commit_alpha: float = 1e-4  # the per-commit test's alpha (pinning must not guess)
    unknown_metric: Literal["raise", "report"] = "raise"
    tail_window: int = 300  # IncrementalDetector: points re-examined on each append
    suspect_alpha: float = 0.05  # a boundary with p at most this (but above search.alpha) is a suspect
    max_suspects: int = 3  # per series, strongest first (no flood)
    suspect_commits: int = 7  # commits an unpinned change's rounds re-measure, centred on it
    # The suspects' own MDL search over the newest commits. At the full penalty a 2 % step of the
    # benchmark's real-noise family is often proposed only 8-13 commits on; on its tuning seeds 11-20
    # the median is 5 commits at 0.5 and 3 at 0.25, but at 0.25 8 of 10 quiet series (1 % Gaussian
    # noise, 300 commits) hold a pending suspect, where 0.5 gives none.
    suspect_penalty: float = 0.5
    suspect_tail: int = 50  # ... over the newest commits only (older steps: the full search has had its commits)
    # The suspects' search again on each commit's best repetition, over the newest best_tail commits
    # (interference only makes a run worse). Tuning seeds 11-20 (real family): tails of 8 / 15 / 25 / 50
    # gave a median delay of 3.1 / 3.0 / 3.4 / 3.5 commits at 9.1 / 10.5 / 10.6 / 11.5 suspects per
    # 1000 commits away from any step.
    best_runs: bool = True
    best_tail: int = 15
    # Confirmation of a suspect: interleaved sessions of a commit before its located range and one
    # after it (the bracket, ``bracket_slack`` commits wider than the range each way), judged on
    # their own pairs at ``confirm_alpha`` spent over at most ``confirm_looks`` sessions (Pocock).
    confirm_alpha: float = 1e-3
    confirm_looks: int = 3
    bracket_slack: int = 1
    # Creeps: a ramp of at least ``creep_commits`` commits that explains a run of same-direction
    # boundaries better than steps do is one creep finding, not step alerts.
    creeps: bool = True
    creep_commits: int = 20
    # Windows start at a multiple of this many positions, and the main search learns its frame on
    # the points before the newest block (incremental.py). 25: a 200-commit window keeps 176-200
    # commits, and its search is redone from scratch once every 25 commits.
    block: int = 25
