"""The calibration loop beside a scaling run (perfci_core.analysis.scaling): a lower clock or a busy
sibling moves the loop's figure and not the dataplane's calibrated cost; a line the lcores share
moves the calibrated cost and not the loop. This machine's clock cannot be changed, so the samples
are simulated: what each cause does to TSC cycles (every figure of a core whose clock falls by f
grows by 1/f; a sibling that takes half the multiplier doubles the throughput loop, grows the
dependent chain by little, and slows throughput-bound work like the loop). And a result document
cannot carry a serial fraction its runs do not identify."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from perfci_core.analysis import scaling
from perfci_core.result import BenchConfig, MetricValue, ResultDocument, Sample

HZ = 2.6e9
COUNTS = (1, 2, 4)
CODE_B = 0.01  # the code's own serial fraction in every scenario: +3 % per packet at 4 lcores, below a move
CPP1 = 20.0  # busy TSC cycles per packet on one lcore
DEP, THR = 3.2, 6.8  # the calibration loop's TSC cycles per iteration on a quiet core


def raw(slow: dict[int, tuple[float, float, float]] | None = None, shared: dict[int, float] | None = None) -> dict[str, float]:
    """One repetition at 1, 2, 4 lcores, the code scaling with B = CODE_B. ``slow``: per count, the
    factors on (the dependent chain, the throughput loop, the dataplane's cycles) from the cores;
    ``shared``: per count, a factor on the dataplane's cycles from what its lcores share."""
    out = {"tsc.tsc_hz": HZ}
    for n in COUNTS:
        dep, thr, work = (slow or {}).get(n, (1.0, 1.0, 1.0))
        code = (shared or {}).get(n, 1.0)
        packets = 4e6
        cpp = CPP1 * (1 + CODE_B * (n - 1)) * work * code  # Amdahl: per-packet time at n lcores
        busy = cpp * packets
        out |= {f"lc.{n}.packets": packets, f"lc.{n}.busy_cycles": busy, f"lc.{n}.window_cycles": busy / n / 0.97,
                f"lc.{n}.cal_dependent": DEP * dep, f"lc.{n}.cal_throughput": THR * thr}
    return out


QUIET = raw()
LOWER_CLOCK = raw(slow={4: (1.25, 1.25, 1.25)})  # all-core turbo: the clock 20 % lower with 4 active cores
BUSY_SIBLING = raw(slow={2: (1.03, 1.8, 1.8), 4: (1.03, 1.8, 1.8)})  # hyperthread siblings busy from 2 lcores
SHARED_LINE = raw(shared={2: 1.7, 4: 2.3})  # a line the lcores pass between them, the loop untouched


def test_a_quiet_host_fits_the_code_s_serial_fraction_on_both():
    m = scaling.derive(QUIET)
    assert m["serial_fraction"] == pytest.approx(CODE_B, abs=1e-6)
    assert m["serial_fraction_calibrated"] == pytest.approx(CODE_B, abs=1e-6)
    assert m["calibration_dependent"] == DEP and m["calibration_throughput"] == THR
    assert m["calibrated_cpp_max_lcores"] == pytest.approx(m["cpp_max_lcores"] / THR)


@pytest.mark.parametrize("scenario, moved", [(LOWER_CLOCK, "the cores' speed (their clock, or other tasks taking their time)"),
                                             (BUSY_SIBLING, "sibling sharing")])
def test_a_lower_clock_or_a_busy_sibling_moves_the_loop_and_not_the_calibrated_figures(scenario, moved):
    quiet, m = scaling.derive(QUIET), scaling.derive(scenario)
    assert m["calibration_throughput"] > 1.2 * quiet["calibration_throughput"]  # the loop's figure moved
    assert m["cpp_max_lcores"] > 1.2 * quiet["cpp_max_lcores"]  # and so did the raw cost per packet
    assert m["calibrated_cpp_max_lcores"] == pytest.approx(quiet["calibrated_cpp_max_lcores"])  # not the calibrated one
    assert m["serial_fraction"] > quiet["serial_fraction"] + 0.05  # B on PPS reads the cores as serial work
    assert m["serial_fraction_calibrated"] == pytest.approx(CODE_B, abs=1e-6)  # B of the code did not move
    text = scaling.attribution([scenario] * 3)
    assert f"Moved: {moved};" in text and "calibrated +3 %" in text and text.endswith(
        f"nor the code's contention (lines or memory the lcores share); B {m['serial_fraction']:.3f} on PPS, 0.010 calibrated"), text
    assert "Moved: nothing" in scaling.attribution([QUIET] * 3)


def test_a_line_the_lcores_share_moves_the_calibrated_figures_and_not_the_loop():
    quiet, m = scaling.derive(QUIET), scaling.derive(SHARED_LINE)
    assert (m["calibration_dependent"], m["calibration_throughput"]) == (quiet["calibration_dependent"], quiet["calibration_throughput"])
    assert m["calibrated_cpp_max_lcores"] == pytest.approx(2.3 * quiet["calibrated_cpp_max_lcores"])
    assert m["serial_fraction_calibrated"] == pytest.approx(m["serial_fraction"]) and m["serial_fraction"] > CODE_B + 0.1
    text = scaling.attribution([SHARED_LINE] * 3)
    assert text.startswith("1 \u2192 4 lcores: busy cycles per packet ")
    assert "Moved: the code's contention (lines or memory the lcores share); not the cores' speed" in text, text
    assert f"B {m['serial_fraction']:.3f} on PPS, {m['serial_fraction_calibrated']:.3f} calibrated" in text


def test_without_the_loop_s_figures_nothing_is_calibrated_and_two_counts_fit_no_b():
    bare = {k: v for k, v in QUIET.items() if ".cal_" not in k}
    m = scaling.derive(bare)
    assert "serial_fraction" in m and not {"serial_fraction_calibrated", "calibrated_cpp_max_lcores", "calibration_throughput"} & m.keys()
    assert scaling.attribution([bare]) is None
    two = {k: v for k, v in SHARED_LINE.items() if not k.startswith("lc.4.")}
    m = scaling.derive(two)
    assert not {"serial_fraction", "serial_fraction_calibrated"} & m.keys() and m["calibration_throughput"] == THR
    text = scaling.attribution([two])
    assert text.startswith("1 \u2192 2 lcores") and "the code's contention" in text and " B " not in text


def _document(raws: list[dict[str, float]], b: list[float]) -> ResultDocument:
    now = datetime.now(UTC)
    samples = [Sample(rep=i, raw=r, metrics=[MetricValue(metric="serial_fraction", backend="tsc", value=v),
                                             MetricValue(metric="pps", backend="tsc", value=3e7)])
               for i, (r, v) in enumerate(zip(raws, b))]
    return ResultDocument(status="ok", commit="a" * 40, config=BenchConfig(name="self-64B-scaling", scaling=True), backend="tsc",
                          machine={"core": 1}, machine_id="b" * 64, samples=samples, started_at=now, finished_at=now)


def test_a_document_cannot_carry_a_serial_fraction_from_two_lcore_counts():
    """An agent that still fits B from 1 and 2 lcores uploads it; the result document (which the
    server validates every upload with) takes it out and says so: absent, never stored."""
    two = {k: v for k, v in QUIET.items() if not k.startswith("lc.4.")}
    doc = _document([two, two], [0.44, 0.45])
    assert [[m.metric for m in s.metrics] for s in doc.samples] == [["pps"], ["pps"]]
    assert len(doc.notes) == 1 and doc.notes[0].startswith("unidentified serial_fraction (tsc) rep 0 = 0.44, rep 1 = 0.45: "
                                                           "a serial fraction needs throughput at 3 or more lcore counts")
    kept = _document([QUIET], [0.05])
    assert [m.metric for m in kept.samples[0].metrics] == ["serial_fraction", "pps"] and kept.notes == []
    no_runs = _document([{"tsc.tsc_hz": HZ}], [0.2])  # nothing to judge it by: left as uploaded
    assert [m.metric for m in no_runs.samples[0].metrics] == ["serial_fraction", "pps"]
