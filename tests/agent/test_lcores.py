"""Runs at several lcore counts (perfci_agent.lcores): which counts a config runs, the per-lcore
totals of a report, and the metrics derived from recorded reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfci_agent import lcores, runner
from perfci_agent.errors import RunFailed, UsageError
from perfci_core import metrics
from perfci_core.analysis import scaling
from perfci_core.result import BenchConfig, Sample

REPORTS = Path(__file__).parent / "fixtures" / "reports"
T, P, S = metrics.Backend.TSC, metrics.Backend.PMU, metrics.Backend.SIM


def report(name: str) -> dict:
    return json.loads((REPORTS / name).read_text())


def test_counts_for_each_kind_of_config():
    assert lcores.counts_for(BenchConfig(), [1, 0], T) == [1]
    assert lcores.counts_for(BenchConfig(scaling=True), [1, 0], T) == [1, 2]
    assert lcores.counts_for(BenchConfig(scaling=True), [5, 4, 3, 2], P) == [1, 2, 4]
    assert lcores.counts_for(BenchConfig(scaling=True, lcores=3), [5, 4, 3, 2], T) == [1, 2, 3]
    # 1, 2, 4, ... up to the allotted cores, the widest run last: the 16-core host's 15 lcores
    assert lcores.scaling_counts(15) == [1, 2, 4, 8, 15] and lcores.scaling_counts(16) == [1, 2, 4, 8, 16]
    assert lcores.scaling_counts(2) == [1, 2] and lcores.scaling_counts(5) == [1, 2, 4, 5]
    assert lcores.counts_for(BenchConfig(lcores=2), [1, 0], T) == [2]
    # sim at a fixed count above one: the hazard simulator counts the line transfers between lcores
    assert lcores.counts_for(BenchConfig(lcores=2), [1, 0], S) == [2]


@pytest.mark.parametrize("config, allotted, backend, why", [
    (BenchConfig(lcores=3), [1, 0], T, "needs 3 lcores; this agent is allotted 2"),
    (BenchConfig(scaling=True), [1], T, "needs two or more lcores"),
    (BenchConfig(scaling=True), [1, 0], S, "valgrind runs a program's threads one at a time"),
    (BenchConfig(lcores=2), [1, 0], P, "pmu counts one forwarding lcore"),
])
def test_configs_this_agent_cannot_run_are_usage_errors(config, allotted, backend, why):
    with pytest.raises(UsageError, match=why):
        lcores.counts_for(config, allotted, backend)


def test_lcore_totals_of_a_multi_lcore_report():
    raw = lcores.lcore_raw(report("forward-self-64B-2lcores.json"), 2)
    assert raw == {"lc.2.packets": 4_000_000.0, "lc.2.busy_cycles": 52_000_000.0, "lc.2.window_cycles": 40_500_000.0}
    with pytest.raises(RunFailed, match="asked for 3 forwarding lcore.s., the report has 2"):
        lcores.lcore_raw(report("forward-self-64B-2lcores.json"), 3)


def test_a_report_without_per_lcore_counters_is_one_lcore():
    one = report("forward-self-64B.json")
    assert lcores.lcore_raw(one, 1) == {"lc.1.packets": 2_000_000.0, "lc.1.busy_cycles": 25_596_012.0, "lc.1.window_cycles": 36_473_684.0}
    with pytest.raises(RunFailed, match="no per-lcore counters"):
        lcores.lcore_raw(one, 2)


def test_scaling_metrics_from_recorded_reports():
    one, two = report("forward-self-64B.json"), report("forward-self-64B-2lcores.json")
    raw = {**runner.tsc_raw(one), **lcores.lcore_raw(one, 1), **lcores.lcore_raw(two, 2)}
    m = scaling.derive(raw)
    hz = 2.6e9
    pps1, pps2 = 2e6 * hz / 36_473_684, 4e6 * hz / 40.5e6  # 2 lcores: the shared wall-clock window
    assert m["pps_max_lcores"] == pytest.approx(pps2)
    assert m["scaling_efficiency"] == pytest.approx(pps2 / (2 * pps1))
    assert "serial_fraction" not in m  # two lcore counts: no B
    assert m["roi_cpu"] == pytest.approx((pps2 / 1e6) ** 2 / (52e6 / 40.5e6))
    assert metrics.derive_tsc(raw)["pps"] == pytest.approx(pps1)  # the sample's ordinary pps is 1 lcore's


def four_lcores(two_lcores: dict[str, float], speedup: float = 1.7) -> dict[str, float]:
    """A run at 4 lcores made from one at 2: ``speedup`` times the packets in the same window."""
    return {"lc.4.packets": two_lcores["lc.2.packets"] * speedup, "lc.4.busy_cycles": two_lcores["lc.2.busy_cycles"] * 2,
            "lc.4.window_cycles": two_lcores["lc.2.window_cycles"]}


def test_every_sample_gains_the_interval_of_the_result():
    one, two = report("forward-self-64B.json"), report("forward-self-64B-2lcores.json")
    samples = []
    for rep, slower in enumerate((1.0, 1.02, 0.97, 1.01)):
        raw = {**runner.tsc_raw(one), **lcores.lcore_raw(one, 1), **lcores.lcore_raw(two, 2)}
        raw["lc.2.window_cycles"] *= slower
        samples.append(Sample(rep=rep, raw={**raw, **four_lcores(raw)}))
    out = lcores.with_interval(samples, T)
    bounds = [{m.metric: m.value for m in s.metrics} for s in out]
    assert all(b == bounds[0] for b in bounds) and set(bounds[0]) == {"serial_fraction_low", "serial_fraction_high"}
    assert bounds[0]["serial_fraction_low"] < bounds[0]["serial_fraction_high"]
    assert lcores.with_interval(samples[:1], T) == samples[:1]
    two_counts = [Sample(rep=s.rep, raw={k: v for k, v in s.raw.items() if not k.startswith("lc.4.")}) for s in samples]
    assert lcores.with_interval(two_counts, T) == two_counts  # no B, no interval


def test_a_real_scaling_run_from_the_command_line(scratch_repo):
    """1 and 2 lcores with tsc on this machine, through `perfci measure --scaling --json`. Only the
    structure is asserted: on a shared 2-core VM the figures themselves are noise."""
    import os
    import subprocess

    from perfci_core.result import ResultDocument

    r = scratch_repo
    out = subprocess.run([str(Path(os.sys.executable).parent / "perfci"), "measure", "--repo", str(r["repo"]), "--commit", r["base"],
                          "--backend", "tsc", "--config", "self-64B-short", "--scaling", "--reps", "2", "--cache-dir", str(r["cache"]),
                          "--json"], capture_output=True, text=True, timeout=600)
    if len(os.sched_getaffinity(0)) < 2:
        assert out.returncode == 2 and "needs two or more lcores" in out.stderr
        return
    assert out.returncode == 0, out.stderr
    doc = ResultDocument.model_validate_json(out.stdout)
    assert doc.config.scaling and doc.config.name == "self-64B-short-scaling" and len(doc.samples) == 2
    assert "energy" in doc.unavailable or any("power_w" == m.metric for s in doc.samples for m in s.metrics)
    counts = lcores.scaling_counts(len(os.sched_getaffinity(0)))
    if len(counts) < 3:  # this 2-core VM: no B, and the result says why
        assert doc.unavailable["serial_fraction"].startswith("not fitted: a serial fraction needs throughput at 3 or more lcore counts, "
                                                             "measured at 1, 2")
    for s in doc.samples:
        assert {f"lc.{n}.{k}" for n in counts for k in ("packets", "window_cycles", "cal_dependent", "cal_throughput")} <= s.raw.keys()
        assert s.raw[f"lc.{counts[-1]}.packets"] >= s.raw["lc.1.packets"] == doc.config.packets  # --packets is the total over the lcores
        # the calibration loop ran before every run, on its cores: a figure of its own, positive
        assert all(s.raw[f"lc.{n}.cal_{k}"] > 0 for n in counts for k in ("dependent", "throughput"))
        m = {v.metric: v.value for v in s.metrics}
        assert {"pps", "cpp", "cur", "pps_max_lcores", "scaling_efficiency", "roi_cpu", "cpp_max_lcores", "calibrated_cpp_max_lcores",
                "calibration_dependent", "calibration_throughput"} <= m.keys()
        assert m["calibration_throughput"] == s.raw[f"lc.{counts[-1]}.cal_throughput"] > 0
        assert m["calibrated_cpp_max_lcores"] == pytest.approx(m["cpp_max_lcores"] / m["calibration_throughput"])
        if len(counts) < 3:
            assert not {"serial_fraction", "serial_fraction_low", "serial_fraction_high", "serial_fraction_calibrated"} & m.keys()
        else:
            assert 0.0 <= m["serial_fraction"] <= 1.0 and m["serial_fraction_low"] <= m["serial_fraction_high"]
        assert m["pps"] == pytest.approx(scaling.throughputs(s.raw)[1])
        assert m["pps_max_lcores"] == pytest.approx(scaling.throughputs(s.raw)[counts[-1]])
    assert scaling.attribution([s.raw for s in doc.samples]).startswith(f"1 \u2192 {counts[-1]} lcores: busy cycles per packet")
    refused = subprocess.run([str(Path(os.sys.executable).parent / "perfci"), "measure", "--repo", str(r["repo"]), "--commit", r["base"],
                              "--backend", "sim", "--scaling", "--cache-dir", str(r["cache"])], capture_output=True, text=True, timeout=600)
    assert refused.returncode == 2 and "valgrind runs a program's threads one at a time" in refused.stderr


def _scaling_document(samples: list[Sample], scaling_config: bool = True):
    from datetime import datetime, timezone

    from perfci_core.result import ResultDocument

    now = datetime.now(timezone.utc)
    return ResultDocument(status="ok", commit="a" * 40, config=BenchConfig(name="self-64B-scaling", scaling=scaling_config), backend=T,
                          machine={"core": 1}, machine_id="b" * 64, samples=samples, started_at=now, finished_at=now)


def test_host_reference_from_a_scaling_result(tmp_path, capsys):
    from perfci_agent import scaling_reference

    one, two = report("forward-self-64B.json"), report("forward-self-64B-2lcores.json")
    samples = []
    for rep, slower in enumerate((1.0, 1.02, 0.97)):
        raw = {**runner.tsc_raw(one), **lcores.lcore_raw(one, 1), **lcores.lcore_raw(two, 2)}
        raw["lc.2.window_cycles"] *= slower
        samples.append(Sample(rep=rep, raw=raw))
    path = tmp_path / "scaling.json"
    # two lcore counts: the throughputs, no B, and why (exit status 3)
    path.write_text(_scaling_document(samples).model_dump_json(by_alias=True))
    assert scaling_reference.main([str(path), "--json"]) == 3
    ref = json.loads(capsys.readouterr().out)
    pps1, pps2 = 2e6 * 2.6e9 / 36_473_684, 4e6 * 2.6e9 / 40.5e6  # the median repetition is the unchanged one
    assert ref["serial_fraction"] is None and ref["interval"] is None and ref["serial_fraction_calibrated"] is None
    assert ref["why_no_serial_fraction"].startswith("a serial fraction needs throughput at 3 or more lcore counts, measured at 1, 2")
    assert ref["pps"] == {"1": pytest.approx(pps1), "2": pytest.approx(pps2)}
    assert scaling_reference.main([str(path)]) == 3
    assert capsys.readouterr().out.startswith("no serial fraction: a serial fraction needs throughput at 3 or more lcore counts")
    # three: B fitted to the median throughputs, with its interval
    for s in samples:
        s.raw.update(four_lcores(s.raw))
    path.write_text(_scaling_document(samples).model_dump_json(by_alias=True))
    assert scaling_reference.main([str(path), "--json"]) == 0
    ref = json.loads(capsys.readouterr().out)
    assert ref["serial_fraction"] == pytest.approx(scaling.fit_serial_fraction({1: pps1, 2: pps2, 4: pps2 * 1.7}).serial, abs=1e-6)
    assert ref["lcores"] == [1, 2, 4] and ref["repetitions"] == 3 and ref["why_no_serial_fraction"] is None
    assert ref["interval"][0] <= ref["serial_fraction"] <= ref["interval"][1]
    path.write_text(_scaling_document(samples, scaling_config=False).model_dump_json(by_alias=True))
    assert scaling_reference.main([str(path)]) == 2
    assert "is not a scaling measurement" in capsys.readouterr().err
    path.write_text("{}")
    assert scaling_reference.main([str(path)]) == 2
