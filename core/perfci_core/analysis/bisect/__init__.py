"""Bisection: which commit of an ordered range moved a metric from ``good``'s level to ``bad``'s.

Pure (numbers in, decisions out); the same search runs locally (``perfci bisect --local``), on the
server (Celery, one job per commit) and in the benchmark. Endpoints, then a binary search with
direction-aware SAME / DIFFERENT / UNKNOWN verdicts per step, more repetitions while UNKNOWN (each
look at its share of alpha), skips for commits that do not build, a scan when the endpoints do not
show the hunted kind, moves against it isolated, and a confirmation of the culprit with fresh
repetitions. How and why: docs/design.md, "Bisection".

- :mod:`.policy`  — repetitions, levels and what is hunted; what is known per commit
- :mod:`.search`  — :class:`Bisection` and :func:`run`
- :mod:`.outcome` — the outcome, the stored state, comparisons for people and JSON
"""

from .outcome import Outcome, State, change_text, comparison_dict
from .policy import (
    DIRECTIONS, MIN_EFFECT_FLOOR, STEP_SHARE, Direction, Measure, Observation, Phase, Policy, Sampled, Status,
    paired_samples,
)
from .search import Bisection, Sampler, run

__all__ = ["DIRECTIONS", "MIN_EFFECT_FLOOR", "STEP_SHARE", "Bisection", "Direction", "Measure", "Observation", "Outcome",
           "Phase", "Policy", "Sampled", "Sampler", "State", "Status", "change_text", "comparison_dict", "paired_samples", "run"]
