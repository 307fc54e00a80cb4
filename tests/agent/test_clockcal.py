"""The calibration loop of scaling runs (perfci_agent.clockcal), built and run on this machine:
figures present, positive and from the CPUs asked for. What the figures mean against the
dataplane's is tests/analysis/test_scaling_calibration.py's (no test here reads a timing)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from perfci_agent import clockcal

CPUS = sorted(os.sched_getaffinity(0), reverse=True)


@pytest.fixture(scope="module")
def exe(tmp_path_factory) -> Path:
    return clockcal.binary(tmp_path_factory.mktemp("tools"))


def test_built_once_and_reused(exe):
    assert exe.name == "perfci-clockcal" and os.access(exe, os.X_OK)
    mtime = exe.stat().st_mtime_ns
    assert clockcal.binary(exe.parent.parent) == exe and exe.stat().st_mtime_ns == mtime


def test_every_forwarding_cpu_gets_both_figures(exe):
    cal = clockcal.run(exe, CPUS, iterations=200_000, rounds=3)
    assert [c.cpu for c in cal.cores] == CPUS  # pinned where asked (the loop reports where it ran)
    assert all(c.dependent > 0 and c.throughput > 0 for c in cal.cores)
    raw = cal.raw(len(CPUS))
    assert raw == {f"lc.{len(CPUS)}.cal_dependent": pytest.approx(sum(c.dependent for c in cal.cores) / len(CPUS)),
                   f"lc.{len(CPUS)}.cal_throughput": pytest.approx(sum(c.throughput for c in cal.cores) / len(CPUS))}


def test_a_cpu_this_process_may_not_use_is_a_clear_error(exe):
    outside = max(CPUS) + 1
    with pytest.raises(clockcal.CalibrationUnavailable, match=rf"failed on CPUs {outside}"):
        clockcal.run(exe, [outside], iterations=1000, rounds=1)


def test_bad_output_is_refused_with_what_is_wrong():
    good = {"schema": clockcal.SCHEMA, "iterations": 10, "rounds": 1,
            "cpus": [{"cpu": 1, "ran_on": 1, "dependent": 3.2, "throughput": 6.8}]}
    assert clockcal.parse(json.dumps(good), [1]).dependent == 3.2
    for text, why in ((json.dumps({**good, "schema": "other/1"}), "schema 'other/1'"), ("not json", "unusable"),
                      (json.dumps({**good, "cpus": [{**good["cpus"][0], "ran_on": 0}]}), r"ran on CPUs \[0\], not on \[1\]"),
                      (json.dumps({**good, "cpus": [{**good["cpus"][0], "dependent": 0.0}]}), "measured no time")):
        with pytest.raises(clockcal.CalibrationUnavailable, match=why):
            clockcal.parse(text, [1])


def test_without_a_compiler_toolchain_the_error_says_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no cc, meson or ninja
    with pytest.raises(clockcal.CalibrationUnavailable, match="needs cc, which is not installed.*meson and ninja"):
        clockcal.binary(tmp_path / "tools")


def test_a_scaling_run_without_the_loop_keeps_its_samples_and_says_why(monkeypatch):
    from types import SimpleNamespace

    from perfci_agent import lcores
    from perfci_core import metrics
    from perfci_core.result import BenchConfig

    def no_toolchain(cache):
        raise clockcal.CalibrationUnavailable("the calibration loop needs meson, which is not installed")

    class Recorded(lcores.Runs):
        def _dataplane(self, n, cores, with_energy):
            window = {"packets": {"rx": 1000 * n}, "cycles": {"busy": 20_000 * n, "idle": 0, "harness": 0, "window": 25_000},
                      "polls": {"empty": 0, "busy": 40 * n}}
            report = {"window": window, "tsc_hz": 2.6e9, "lcores": [{}] * n}
            return report, lcores.lcore_raw(report, n)

    monkeypatch.setattr(clockcal, "binary", no_toolchain)
    runs = Recorded(SimpleNamespace(name=metrics.Backend.TSC), Path("fwd"), [1, 0], [1, 2], BenchConfig(scaling=True), Path("."), None)
    samples = [runs.sample(rep) for rep in range(2)]
    assert all({"lc.1.packets", "lc.2.packets"} <= s.raw.keys() and not any(".cal_" in k for k in s.raw) for s in samples)
    assert runs.unavailable["calibration"] == "not measured: the calibration loop needs meson, which is not installed"
    assert runs.unavailable["serial_fraction"].startswith("not fitted: a serial fraction needs throughput at 3 or more lcore counts")
