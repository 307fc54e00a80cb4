"""Pure analysis core: statistics over numbers. Imports nothing of FastAPI, SQLAlchemy or Celery.

- :mod:`.series`       — input points (commit + repetitions), cleaning of bad input, the search scale
- :mod:`.noise`        — robust noise estimates and the learned minimum effect
- :mod:`.compare`      — SAME / DIFFERENT / UNKNOWN between two samples (detection and bisect)
- :mod:`.changepoints` — MDL grouping over the commit order with validated boundaries
- :mod:`.detect`       — regressions/improvements of a series, suspects, confirmation, creeps
- :mod:`.adaptive`     — which confirmation sessions to measure for the suspects
- :mod:`.explain`      — lean-model (IPP x eIPC x CUR) explanation of a change
- :mod:`.bisect`       — the bisection search (SAME / DIFFERENT / UNKNOWN per commit, skips, confirmation)
"""

from .compare import Comparison, Kind, Verdict, compare
from .detect import Change, Creep, DetectionResult, IncrementalDetector, Settings, Suspect, detect
from .explain import Explanation, explain
from .series import CleanSeries, Point, clean

__all__ = [
    "Change",
    "CleanSeries",
    "Creep",
    "Comparison",
    "DetectionResult",
    "Suspect",
    "Explanation",
    "IncrementalDetector",
    "Kind",
    "Point",
    "Settings",
    "Verdict",
    "clean",
    "compare",
    "detect",
    "explain",
]
