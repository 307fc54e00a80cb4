"""Parallel scaling and return on investment: Amdahl's serial fraction from throughput at 1..N
lcores, scaling efficiency, and the ROI metrics T²/ΣCPU and T²/P (docs/design.md, "Memory hazards, scaling and energy").

Amdahl (the ZTE study) with the one-lcore time normalised to 1: N lcores take B + (1 − B)/N, so
in throughput form

    PPS(N) = PPS(1) · N / (1 + B · (N − 1))          speed-up S(N) = PPS(N) / PPS(1)
    E(N)   = PPS(N) / (N · PPS(1))                     scaling efficiency, 1 = perfect

B is fitted by least squares (scipy ``curve_fit``) over (N, PPS) with PPS(1) free and B bounded
to [0, 1], the range where the model means anything: a run that scales super-linearly (a cache
effect the model does not have) fits B = 0 and shows as E(N) > 1. With two lcore counts (1 and
2, all a 2-core machine has) B = 2 · PPS(1)/PPS(2) − 1 is exactly determined and the fit is that
formula.

Confidence interval: a percentile bootstrap over whole repetitions (``scipy.stats.bootstrap``,
``paired``: a resample keeps each repetition's runs together, since they ran back to back on the
same machine state), refitting B on the median PPS at each lcore count. Not ``curve_fit``'s
covariance: with two lcore counts the fit has zero degrees of freedom and no covariance at all,
and the noise that matters (run-to-run throughput on a shared machine, heavy-tailed) is in the
repetitions, not in a fit residual. With two lcore counts the interval is therefore the spread of
B that the run-to-run noise of PPS(1) and PPS(2) implies — not a test of the model, which two
points cannot make.

Raw keys (per sample): ``lc.<n>.packets``, ``lc.<n>.busy_cycles`` (summed over the n forwarding
lcores), ``lc.<n>.window_cycles`` (the shared window's wall-clock length),
with ``tsc.tsc_hz``; energy of the run at n lcores, where measured, in ``lc.<n>.pkg_joules`` and
``lc.<n>.energy_seconds``, and what else ran on the package in ``lc.<n>.other_cpus_busy``.

The metrics of one sample come from that sample's runs alone, so detection compares repetitions of B like any other metric; the bootstrap bounds of the whole
result are stored in every sample as ``serial_fraction_low`` / ``serial_fraction_high``.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
from scipy import optimize, stats

CONFIDENCE = 0.95
RESAMPLES = 2000
_BOUNDARY = 1e-9
_KEY = re.compile(r"^lc\.(\d+)\.(packets|busy_cycles|window_cycles|pkg_joules|energy_seconds|other_cpus_busy)$")


def amdahl_pps(lcores: np.ndarray | float, pps1: float, serial: float) -> np.ndarray | float:
    """Throughput at ``lcores`` under Amdahl's law with serial fraction ``serial``."""
    return pps1 * lcores / (1.0 + serial * (np.asarray(lcores) - 1.0))


def efficiency(lcores: int, pps_n: float, pps_1: float) -> float:
    """E(N) = PPS(N) / (N · PPS(1))."""
    return pps_n / (lcores * pps_1)


@dataclass(frozen=True)
class AmdahlFit:
    pps1: float  # fitted one-lcore throughput
    serial: float  # B, in [0, 1]
    lcores: tuple[int, ...]


def fit_serial_fraction(points: Mapping[int, float]) -> AmdahlFit:
    """Least-squares Amdahl fit of ``{lcores: pps}``; needs two or more lcore counts."""
    ns = sorted(n for n, v in points.items() if v is not None and math.isfinite(v) and v > 0)
    if len(ns) < 2:
        raise ValueError(f"a serial fraction needs throughput at two or more lcore counts, got {ns}")
    x = np.array(ns, dtype=float)
    y = np.array([points[n] for n in ns], dtype=float)
    scale = y[0] / x[0]  # fit in units of the first point's per-lcore throughput: well-conditioned
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optimize.OptimizeWarning)  # no covariance with 2 points
        (p1, b), _ = optimize.curve_fit(amdahl_pps, x, y / scale, p0=(1.0, 0.1),
                                        bounds=([0.0, 0.0], [np.inf, 1.0]), xtol=1e-12, ftol=1e-12, gtol=1e-12)
    b = 0.0 if b < _BOUNDARY else 1.0 if b > 1.0 - _BOUNDARY else float(b)  # the solver stops a hair inside a bound
    return AmdahlFit(float(p1 * scale), b, tuple(ns))


def _median_fitter(lcores: Sequence[int]) -> Callable[..., float]:
    # A resample's medians take few distinct values (5 repetitions: at most 5 per lcore count),
    # so most of the bootstrap's refits repeat: fit each distinct tuple of medians once.
    fits: dict[tuple[float, ...], float] = {}

    def fit(*columns: np.ndarray) -> float:
        medians = tuple(float(np.median(c)) for c in columns)
        if medians not in fits:
            fits[medians] = fit_serial_fraction(dict(zip(lcores, medians))).serial
        return fits[medians]

    return fit


def serial_fraction_interval(reps: Sequence[Mapping[int, float]], confidence: float = CONFIDENCE,
                             resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval of B over whole repetitions (each a ``{lcores: pps}``);
    None with fewer than two repetitions holding the same two or more lcore counts."""
    common = sorted(set.intersection(*(set(r) for r in reps))) if reps else []
    if len(reps) < 2 or len(common) < 2:
        return None
    columns = [np.array([r[n] for r in reps], dtype=float) for n in common]
    fit = _median_fitter(common)
    if all(np.ptp(c) == 0 for c in columns):  # identical repetitions: nothing to resample
        b = fit(*columns)
        return b, b
    res = stats.bootstrap(columns, fit, paired=True, vectorized=False,
                          confidence_level=confidence, n_resamples=resamples, method="percentile",
                          random_state=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


@dataclass(frozen=True)
class LcorePoint:
    lcores: int
    packets: float
    busy_cycles: float
    window_cycles: float
    pkg_joules: float | None = None
    energy_seconds: float | None = None
    other_cpus_busy: float | None = None

    def pps(self, hz: float) -> float:
        return self.packets * hz / self.window_cycles

    def cpus_busy(self) -> float:
        """ΣCPU as a rate: busy CPU-seconds of the forwarding lcores per second of the window."""
        return self.busy_cycles / self.window_cycles


def points_of(raw: Mapping[str, float | None]) -> dict[int, LcorePoint]:
    """The runs of one sample by lcore count, from its ``lc.<n>.*`` raw keys."""
    fields: dict[int, dict[str, float]] = {}
    for key, value in raw.items():
        m = _KEY.match(key)
        if m and value is not None:
            fields.setdefault(int(m.group(1)), {})[m.group(2)] = value
    out = {}
    for n, f in fields.items():
        if {"packets", "busy_cycles", "window_cycles"} <= f.keys() and f["window_cycles"] > 0 and f["packets"] > 0:
            out[n] = LcorePoint(n, f["packets"], f["busy_cycles"], f["window_cycles"], f.get("pkg_joules"), f.get("energy_seconds"), f.get("other_cpus_busy"))
    return out


def throughputs(raw: Mapping[str, float | None]) -> dict[int, float]:
    hz = raw.get("tsc.tsc_hz")
    if not hz:
        return {}
    return {n: p.pps(hz) for n, p in points_of(raw).items()}


def derive(raw: Mapping[str, float | None]) -> dict[str, float]:
    """Scaling and ROI metrics of one sample (see the module docstring). ROI and energy are taken
    at the widest run of the sample (its most lcores).

    ROI (the Bloomberg study): T²/ΣCPU in Mpps² per busy CPU, ΣCPU the busy cycles of the
    forwarding lcores over the window (so 10 Mpps on two busy CPUs beats 5 Mpps on one), and T²/P
    in Mpps² per package watt."""
    hz = raw.get("tsc.tsc_hz")
    points = points_of(raw)
    if not hz or not points:
        return {}
    top = points[max(points)]
    pps = top.pps(hz)
    out: dict[str, float] = {}
    if top.busy_cycles > 0:
        out["roi_cpu"] = (pps / 1e6) ** 2 / top.cpus_busy()
    if top.pkg_joules is not None and top.energy_seconds and top.pkg_joules > 0:
        watts = top.pkg_joules / top.energy_seconds
        out["power_w"] = watts
        out["energy_per_packet"] = 1e9 * top.pkg_joules / top.packets  # nJ; RAPL gated to the same window
        out["roi_power"] = (pps / 1e6) ** 2 / watts
        if top.other_cpus_busy is not None:
            out["other_cpus_busy"] = top.other_cpus_busy
    if len(points) >= 2 and 1 in points:
        n = max(points)
        out["pps_max_lcores"] = pps
        out["scaling_efficiency"] = efficiency(n, pps, points[1].pps(hz))
        out["serial_fraction"] = fit_serial_fraction({k: p.pps(hz) for k, p in points.items()}).serial
    return out


def interval_metrics(raws: Sequence[Mapping[str, float | None]]) -> dict[str, float]:
    """``serial_fraction_low`` / ``_high`` of a whole result from its samples' raw counts."""
    ci = serial_fraction_interval([t for t in (throughputs(r) for r in raws) if len(t) >= 2])
    return {} if ci is None else {"serial_fraction_low": ci[0], "serial_fraction_high": ci[1]}
