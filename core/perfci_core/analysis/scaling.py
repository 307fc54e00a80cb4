"""Parallel scaling and return on investment: Amdahl's serial fraction from throughput at several
lcore counts, scaling efficiency, the calibration loop that tells the clock from contention, and the
ROI metrics T²/ΣCPU and T²/P (docs/design.md, "Memory hazards, scaling and energy";
docs/scaling-energy.md).

Amdahl (the ZTE study) with the one-lcore time normalised to 1: N lcores take B + (1 − B)/N, so
in throughput form

    PPS(N) = PPS(1) · N / (1 + B · (N − 1))          speed-up S(N) = PPS(N) / PPS(1)
    E(N)   = PPS(N) / (N · PPS(1))                     scaling efficiency, 1 = perfect

B is fitted by least squares (scipy ``curve_fit``) over (N, PPS) with PPS(1) free and B bounded
to [0, 1], the range where the model means anything: a run that scales super-linearly (a cache
effect the model does not have) fits B = 0 and shows as E(N) > 1; a fit on a bound is that bound
exactly, so an interval can hold 0 and 1.

**B needs three or more lcore counts** (:data:`MIN_LCORE_COUNTS`). From two (1 and 2, all a 2-core
machine has) B = 2 · PPS(1)/PPS(2) − 1 is the data itself: the model has no degree of freedom
left to be tested, and whatever slows the second lcore — the host, the clock, a sibling — is
read as serial work. On a 16-core host, B from 1 and 2 lcores put the base dataplane above a
regression that shares a counter between lcores; from 1..15 lcores the order was right
(docs/scaling-energy.md). With fewer counts there is no ``serial_fraction`` at all, and
:func:`unidentified` says why.

Confidence interval: a percentile bootstrap over whole repetitions (``scipy.stats.bootstrap``,
``paired``: a resample keeps each repetition's runs together, since they ran back to back on the
same machine state), refitting B on the median PPS at each lcore count. Not ``curve_fit``'s
covariance: the noise that matters (run-to-run throughput on a shared machine, heavy-tailed) is in
the repetitions, not in a fit residual.

**The calibration loop** (the agent's ``clockcal``) runs on every forwarding core right before
the dataplane at each lcore count: a dependent multiply chain, whose TSC cycles per iteration move
with the core clock only (and with time other tasks take from the core: TSC cycles are wall-clock
cycles), and eight independent chains, bound by the multiplier's throughput, which also move when a
sibling hyperthread takes the core's execution units. Neither touches memory, so
neither sees the dataplane's contention. The dataplane's busy cycles per packet divided by the
throughput loop's cycles per iteration (``calibrated_cpp``, in loop iterations per packet) is the
cost with the clock and the sibling taken out: what is left when it rises with the lcores is the
code's contention (lines or memory the lcores share). B is fitted on both: on PPS, and on PPS
scaled by each count's loop slowdown, PPS(N) · T(N)/T(1) with T the throughput loop's cycles per
iteration (``serial_fraction_calibrated``); :func:`attribution` says which moved.

Raw keys (per sample): ``lc.<n>.packets``, ``lc.<n>.busy_cycles`` (summed over the n forwarding
lcores), ``lc.<n>.window_cycles`` (the shared window's wall-clock length),
with ``tsc.tsc_hz``; the calibration loop's TSC cycles per iteration, mean over the n cores, in
``lc.<n>.cal_dependent`` and ``lc.<n>.cal_throughput``; energy of the run at n lcores, where
measured, in ``lc.<n>.pkg_joules`` and ``lc.<n>.energy_seconds``, and what else ran on the package
in ``lc.<n>.other_cpus_busy``.

The metrics of one sample come from that sample's runs alone, so detection compares repetitions
of B like any other metric; the bootstrap bounds of the whole result are stored in every sample as
``serial_fraction_low`` / ``serial_fraction_high``.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
# scipy (about a second to import) is imported by the functions that use it: the API, the agent and
# the CLI import this module for its types and rules, most of them never for a test.

CONFIDENCE = 0.95
RESAMPLES = 2000
MIN_LCORE_COUNTS = 3  # a serial fraction from fewer is the data itself, not a fit (module docstring)
_BOUNDARY = 1e-9
_KEY = re.compile(r"^lc\.(\d+)\.(packets|busy_cycles|window_cycles|pkg_joules|energy_seconds|other_cpus_busy|"
                  r"cal_dependent|cal_throughput)$")


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


def unidentified(counts: Iterable[int]) -> str | None:
    """Why a serial fraction cannot be fitted from throughput at these lcore counts (None: it can)."""
    ns = sorted(set(counts))
    if len(ns) >= MIN_LCORE_COUNTS:
        return None
    at = ", ".join(map(str, ns)) or "none"
    return (f"a serial fraction needs throughput at {MIN_LCORE_COUNTS} or more lcore counts, measured at {at}: from two, "
            "B = 2 PPS(1)/PPS(2) - 1 is the data itself (no degree of freedom tests the model; a slower second core, "
            "clock or sibling reads as serial work)")


def fit_serial_fraction(points: Mapping[int, float]) -> AmdahlFit:
    """Least-squares Amdahl fit of ``{lcores: pps}``; ValueError with fewer than three lcore counts."""
    ns = sorted(n for n, v in points.items() if v is not None and math.isfinite(v) and v > 0)
    why = unidentified(ns)
    if why is not None:
        raise ValueError(why)
    x = np.array(ns, dtype=float)
    y = np.array([points[n] for n in ns], dtype=float)
    scale = y[0] / x[0]  # fit in units of the first point's per-lcore throughput: well-conditioned
    with warnings.catch_warnings():
        from scipy import optimize
        warnings.simplefilter("ignore", optimize.OptimizeWarning)  # the covariance is not used
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
    None with fewer than two repetitions holding the same three or more lcore counts."""
    common = sorted(set.intersection(*(set(r) for r in reps))) if reps else []
    if len(reps) < 2 or unidentified(common) is not None:
        return None
    columns = [np.array([r[n] for r in reps], dtype=float) for n in common]
    fit = _median_fitter(common)
    if all(np.ptp(c) == 0 for c in columns):  # identical repetitions: nothing to resample
        b = fit(*columns)
        return b, b
    from scipy import stats
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
    cal_dependent: float | None = None  # the calibration loop's TSC cycles per iteration (module docstring)
    cal_throughput: float | None = None

    def pps(self, hz: float) -> float:
        return self.packets * hz / self.window_cycles

    def cpp(self) -> float:
        """Busy TSC cycles per packet, over the lcores."""
        return self.busy_cycles / self.packets

    def calibrated_cpp(self) -> float | None:
        """Busy cycles per packet in throughput-loop iterations: the clock and a sibling taken out."""
        return self.cpp() / self.cal_throughput if self.cal_throughput else None

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
            out[n] = LcorePoint(n, f["packets"], f["busy_cycles"], f["window_cycles"], f.get("pkg_joules"), f.get("energy_seconds"),
                                f.get("other_cpus_busy"), _positive(f.get("cal_dependent")), _positive(f.get("cal_throughput")))
    return out


def _positive(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) and x > 0 else None


def throughputs(raw: Mapping[str, float | None]) -> dict[int, float]:
    hz = raw.get("tsc.tsc_hz")
    if not hz:
        return {}
    return {n: p.pps(hz) for n, p in points_of(raw).items()}


def calibrated_throughputs(raw: Mapping[str, float | None]) -> dict[int, float]:
    """PPS at each lcore count scaled by the throughput loop's slowdown against one lcore,
    PPS(n) · T(n)/T(1): the throughput the code would have at the one-lcore clock and sharing.
    Empty unless every count, 1 included, has the loop's figure."""
    hz, points = raw.get("tsc.tsc_hz"), points_of(raw)
    if not hz or 1 not in points or any(p.cal_throughput is None for p in points.values()):
        return {}
    t1 = points[1].cal_throughput
    return {n: p.pps(hz) * p.cal_throughput / t1 for n, p in points.items()}


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
        out["cpp_max_lcores"] = top.cpp()
        if unidentified(points) is None:
            out["serial_fraction"] = fit_serial_fraction({k: p.pps(hz) for k, p in points.items()}).serial
            calibrated = calibrated_throughputs(raw)
            if calibrated:
                out["serial_fraction_calibrated"] = fit_serial_fraction(calibrated).serial
    if top.cal_dependent is not None and top.cal_throughput is not None:
        out["calibration_dependent"] = top.cal_dependent
        out["calibration_throughput"] = top.cal_throughput
        out["calibrated_cpp_max_lcores"] = top.calibrated_cpp()
    return out


def interval_metrics(raws: Sequence[Mapping[str, float | None]]) -> dict[str, float]:
    """``serial_fraction_low`` / ``_high`` of a whole result from its samples' raw counts."""
    ci = serial_fraction_interval([t for t in (throughputs(r) for r in raws) if unidentified(t) is None])
    return {} if ci is None else {"serial_fraction_low": ci[0], "serial_fraction_high": ci[1]}


MOVED = 0.05  # a relative change from one lcore to N that attribution() calls a move


def _pct(r: float) -> str:
    return f"{100 * r:+.0f} %"


def attribution(raws: Sequence[Mapping[str, float | None]]) -> str | None:
    """What moved from one lcore to the most, over a result's samples (medians per lcore count): the
    cores' speed (the dependent chain: the clock, or time other tasks took from the cores, which TSC
    cycles count too), a sibling (the throughput loop beyond the chain), the code's contention (busy
    cycles per packet in throughput-loop iterations); with B on PPS and on the calibrated PPS where
    B is identifiable. None without the calibration loop's figures at 1 and N."""
    per = [points_of(r) for r in raws]
    counts = sorted(set.intersection(*(set(p) for p in per))) if per else []
    if len(counts) < 2 or counts[0] != 1:
        return None
    n = counts[-1]

    def median(k: int, of: Callable[[LcorePoint], float | None]) -> float | None:
        values = [of(p[k]) for p in per]
        return None if any(v is None for v in values) else float(np.median(values))

    cpp1, cppn = median(1, LcorePoint.cpp), median(n, LcorePoint.cpp)
    dep1, depn = median(1, lambda p: p.cal_dependent), median(n, lambda p: p.cal_dependent)
    thr1, thrn = median(1, lambda p: p.cal_throughput), median(n, lambda p: p.cal_throughput)
    cal1, caln = median(1, LcorePoint.calibrated_cpp), median(n, LcorePoint.calibrated_cpp)
    if None in (cpp1, cppn, dep1, depn, thr1, thrn, cal1, caln):
        return None
    dep, thr, code = depn / dep1 - 1, thrn / thr1 - 1, caln / cal1 - 1
    moves = {"the cores' speed (their clock, or other tasks taking their time)": abs(dep) >= MOVED,
             "sibling sharing": thr - dep >= MOVED,
             "the code's contention (lines or memory the lcores share)": abs(code) >= MOVED}
    moved, still = [k for k, v in moves.items() if v], [k for k, v in moves.items() if not v]
    text = (f"1 \u2192 {n} lcores: busy cycles per packet {cpp1:.2f} \u2192 {cppn:.2f} ({_pct(cppn / cpp1 - 1)}); calibration loop "
            f"dependent {dep1:.2f} \u2192 {depn:.2f} ({_pct(dep)}), throughput {thr1:.2f} \u2192 {thrn:.2f} ({_pct(thr)}) cycles per "
            f"iteration; calibrated {_pct(code)}. Moved: {' and '.join(moved) or 'nothing'}"
            + (f"; not {' nor '.join(still)}" if moved and still else ""))
    pps_reps, cal_reps = [throughputs(r) for r in raws], [calibrated_throughputs(r) for r in raws]
    if unidentified(counts) is None and all(set(counts) <= t.keys() for t in pps_reps + cal_reps):
        pps = {k: float(np.median([t[k] for t in pps_reps])) for k in counts}
        cal = {k: float(np.median([t[k] for t in cal_reps])) for k in counts}
        text += f"; B {fit_serial_fraction(pps).serial:.3f} on PPS, {fit_serial_fraction(cal).serial:.3f} calibrated"
    return text
