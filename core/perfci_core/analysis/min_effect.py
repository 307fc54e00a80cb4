"""The minimum effect a verdict between two commits uses, learned from the series' own noise as
detection learns it (``perfci compare --measure``, its benchmark): a fixed floor would call a
noisy series' ordinary spread a change, and miss a quiet series' real one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .detect import Settings as DetectionSettings
from .detect import series_noise
from .noise import learned_min_effect
from .series import CleanSeries, Point, clean

MIN_SERIES_POINTS = 5  # fewer measured commits than this say too little about a series' noise


@dataclass(frozen=True)
class MinEffect:
    """The minimum effect a comparison uses and where it came from."""

    value: float  # relative (0.01 = 1 %)
    source: str  # "series" (learned from the series' noise) or "floor" (the fixed floor)
    noise: float | None  # the series' relative per-commit noise, when learned
    points: int  # measured commits the noise was learned from
    note: str

    def to_dict(self) -> dict:
        return {"value": self.value, "source": self.source, "noise": self.noise, "points": self.points, "note": self.note}


def min_effect_of_series(
    series: CleanSeries | Sequence[Point | tuple[str, float | Sequence[float]]] | None,
    where: str = "the series",
    settings: DetectionSettings = DetectionSettings(),
) -> MinEffect:
    """The minimum effect detection would use on ``series`` (commit order, every repetition):
    ``max(floor, factor x relative per-commit noise)`` with detection's own noise estimate.
    Without a series of at least :data:`MIN_SERIES_POINTS` measured commits, the fixed floor,
    with a note saying so (``where`` names the series in the notes)."""
    floor = settings.min_change
    s = None
    if series is not None:
        s = series if isinstance(series, CleanSeries) else clean(series)
    if s is None or len(s) < MIN_SERIES_POINTS:
        have = 0 if s is None else len(s)
        return MinEffect(floor, "floor", None, have,
                         f"{where}: {have} measured commit(s), fewer than {MIN_SERIES_POINTS}: "
                         f"the fixed floor {floor:.2%} is used, not the series' noise")
    noise, _ = series_noise(s.own())  # as detect learns it
    value = learned_min_effect(noise, floor, settings.noise_factor)
    return MinEffect(value, "series", noise, len(s),
                     f"{where}: learned from {len(s)} commits (per-commit noise {noise:.2%}, "
                     f"minimum effect max({floor:.2%}, {settings.noise_factor:g} x noise))")
