"""Detection of one series: regressions and improvements located at a commit range, suspects to
confirm, and creeps. The rules, their levels and why they were chosen are in docs/design.md,
"Deciding a regression"; the figures in docs/detection.md.

- :mod:`.detection`    — :func:`detect` (the search over commits, pinning, the exact rule on ``sim``)
- :mod:`.suspects`     — the suspects' search and each suspect's bracket
- :mod:`.confirmation` — a bracket's interleaved sessions judged on their own pairs
- :mod:`.creep`        — a ramp is one creep finding, not a staircase of steps
- :mod:`.incremental`  — appending points, block-aligned windows
"""

from .detection import detect, learned_part, series_noise, window_start
from .findings import Change, Creep, DetectionResult, Suspect
from .incremental import IncrementalDetector
from .settings import Settings

__all__ = ["Change", "Creep", "DetectionResult", "IncrementalDetector", "Settings", "Suspect", "detect",
           "learned_part", "series_noise", "window_start"]
