"""Amdahl's serial fraction, scaling efficiency and ROI (perfci_core.analysis.scaling) on
synthetic throughputs with a known B."""

from __future__ import annotations

import numpy as np
import pytest

from perfci_core import metrics
from perfci_core.analysis import scaling

HZ = 2.6e9


def amdahl(b: float, pps1: float = 8e6, lcores=(1, 2, 4, 8)) -> dict[int, float]:
    return {n: float(scaling.amdahl_pps(n, pps1, b)) for n in lcores}


@pytest.mark.parametrize("b", [0.0, 0.02, 0.31, 0.9])
def test_fit_recovers_a_known_serial_fraction(b):
    fit = scaling.fit_serial_fraction(amdahl(b))
    assert fit.serial == pytest.approx(b, abs=1e-6)
    assert fit.pps1 == pytest.approx(8e6, rel=1e-6)


def test_two_lcore_counts_determine_b_exactly():
    # B = 2 PPS(1) / PPS(2) - 1: PPS(2) = 1.5 PPS(1) -> B = 1/3
    assert scaling.fit_serial_fraction({1: 10e6, 2: 15e6}).serial == pytest.approx(1 / 3, abs=1e-6)
    # the example: B 0.31 makes 2 lcores 24 % slower than B 0.02 while 1 lcore does not move
    fast, slow = amdahl(0.02, lcores=(1, 2)), amdahl(0.31, lcores=(1, 2))
    assert slow[2] / fast[2] - 1 == pytest.approx(-0.221, abs=0.001)
    assert slow[1] == fast[1]


def test_super_linear_scaling_fits_the_bound_not_a_negative_fraction():
    fit = scaling.fit_serial_fraction({1: 10e6, 2: 21e6})
    assert fit.serial == 0.0
    assert scaling.efficiency(2, 21e6, 10e6) == pytest.approx(1.05)


def test_fit_needs_two_lcore_counts():
    with pytest.raises(ValueError, match="two or more lcore counts"):
        scaling.fit_serial_fraction({1: 10e6})
    with pytest.raises(ValueError, match="two or more lcore counts"):
        scaling.fit_serial_fraction({1: 10e6, 2: float("nan")})


def test_noisy_repetitions_give_an_interval_around_the_true_b():
    """2 % multiplicative noise on every run, 5 repetitions: the 95 % interval holds the true B in
    most of 40 seeded trials (the bootstrap of 5 repetitions is known to under-cover a little)."""
    true_b, hits, widths = 0.1, 0, []
    for seed in range(40):
        rng = np.random.default_rng(seed)
        reps = [{n: v * (1 + 0.02 * rng.standard_normal()) for n, v in amdahl(true_b).items()} for _ in range(5)]
        lo, hi = scaling.serial_fraction_interval(reps, resamples=500)
        assert lo <= hi
        hits += lo <= true_b <= hi
        widths.append(hi - lo)
    assert hits >= 28
    assert 0.005 < np.median(widths) < 0.1


def test_interval_with_two_lcore_counts_is_the_spread_the_noise_implies():
    rng = np.random.default_rng(7)
    quiet = [{n: v * (1 + 0.001 * rng.standard_normal()) for n, v in amdahl(0.2, lcores=(1, 2)).items()} for _ in range(5)]
    loud = [{n: v * (1 + 0.05 * rng.standard_normal()) for n, v in amdahl(0.2, lcores=(1, 2)).items()} for _ in range(5)]
    q, l_ = scaling.serial_fraction_interval(quiet), scaling.serial_fraction_interval(loud)
    assert q[1] - q[0] < 0.01 < l_[1] - l_[0]
    assert q[0] <= 0.2 + 0.005 and q[1] >= 0.2 - 0.005


def test_interval_needs_two_repetitions():
    assert scaling.serial_fraction_interval([amdahl(0.1)]) is None
    assert scaling.serial_fraction_interval([{1: 1e6}, {1: 1e6}]) is None
    same = amdahl(0.1)
    lo, hi = scaling.serial_fraction_interval([same, same])
    assert lo == hi == pytest.approx(0.1, abs=1e-6)


def _raw(points: dict[int, tuple[float, float, float]], **extra: float) -> dict[str, float]:
    raw = {"tsc.tsc_hz": HZ}
    for n, (packets, busy, window) in points.items():
        raw |= {f"lc.{n}.packets": packets, f"lc.{n}.busy_cycles": busy, f"lc.{n}.window_cycles": window}
    return raw | extra


def test_derive_from_raw_counts():
    # 1 lcore: 2e6 packets in 0.1 s (20 Mpps), busy half the time; 2 lcores: 3e6 packets in 0.1 s
    raw = _raw({1: (2e6, 0.5 * 0.1 * HZ, 0.1 * HZ), 2: (3e6, 2 * 0.8 * 0.1 * HZ, 0.1 * HZ)})
    m = scaling.derive(raw)
    assert m["pps_max_lcores"] == pytest.approx(30e6)
    assert m["scaling_efficiency"] == pytest.approx(0.75)
    assert m["serial_fraction"] == pytest.approx(2 * 20 / 30 - 1, abs=1e-6)
    assert m["roi_cpu"] == pytest.approx(30.0 ** 2 / 1.6)  # Mpps² per busy CPU, at the widest run
    assert not {"power_w", "energy_per_packet", "roi_power"} & m.keys()  # no energy read: no number
    for name, value in m.items():
        assert metrics.Backend.TSC in metrics.get(name).backends and value >= 0


def test_roi_prefers_twice_the_throughput_on_two_cpus():
    """The Bloomberg study's point: 10 on two CPUs beats 5 on one (T²/ΣCPU 50 vs 25)."""
    one = scaling.derive(_raw({1: (0.5e6, 0.1 * HZ, 0.1 * HZ)}))  # 5 Mpps, one busy CPU
    two = scaling.derive(_raw({2: (1e6, 2 * 0.1 * HZ, 0.1 * HZ)}))  # 10 Mpps, two busy CPUs
    assert (one["roi_cpu"], two["roi_cpu"]) == pytest.approx((25.0, 50.0))
    assert "serial_fraction" not in one and "serial_fraction" not in two


def test_energy_metrics_from_the_widest_run():
    raw = _raw({1: (2e6, 0.1 * HZ, 0.1 * HZ)}, **{"lc.1.pkg_joules": 4.5, "lc.1.energy_seconds": 0.1, "lc.1.other_cpus_busy": 0.25})
    m = scaling.derive(raw)
    assert m["power_w"] == pytest.approx(45.0)
    assert m["energy_per_packet"] == pytest.approx(4.5 / 2e6 * 1e9)  # nJ
    assert m["roi_power"] == pytest.approx(20.0 ** 2 / 45.0)
    assert m["other_cpus_busy"] == 0.25


def test_interval_metrics_of_a_result():
    rng = np.random.default_rng(3)
    raws = []
    for _ in range(5):
        pps = {n: v * (1 + 0.01 * rng.standard_normal()) for n, v in amdahl(0.3, 20e6, (1, 2)).items()}
        raws.append(_raw({n: (p * 0.1, 0.1 * HZ * n, 0.1 * HZ) for n, p in pps.items()}))
    ci = scaling.interval_metrics(raws)
    assert ci["serial_fraction_low"] < 0.3 < ci["serial_fraction_high"]
    assert scaling.interval_metrics(raws[:1]) == {}
    per_sample = [scaling.derive(r)["serial_fraction"] for r in raws]
    assert ci["serial_fraction_low"] <= np.median(per_sample) <= ci["serial_fraction_high"]
