"""RAPL energy (perfci_agent.energy): perf and powercap parsing on recorded formats, wrap-around,
missing and unreadable files, "not available" reasons, and the window protocol with the real
dataplane."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from perfci_agent import energy, runner
from perfci_agent.measure import CONFIGS, default_core, measure
from perfci_agent.workspace import Workspace
from perfci_core.analysis import scaling



RAPL = Path(__file__).parent / "fixtures" / "rapl"


def test_perf_csv_recorded_on_an_intel_laptop():
    pkg, ram = energy.parse_perf((RAPL / "intel-i915-csv-energy.txt").read_text())
    assert pkg == 2553.86
    assert ram is None  # no DRAM domain on that part: absent, never 0


def test_perf_csv_interval_amounts_add_up():
    pkg, ram = energy.parse_perf((RAPL / "cloudlab-c220g1-csv-interval-energy-pkg.txt").read_text())
    assert pkg == pytest.approx(19.63 + 19.41 + 19.70 + 20.51 + 19.62)
    assert ram is None


def test_perf_csv_with_dram_and_control_lines():
    assert energy.parse_perf((RAPL / "constructed-csv-energy-pkg-ram.txt").read_text()) == (1.27, 0.21)


def test_perf_without_a_power_pmu_is_unavailable_not_zero():
    text = (RAPL / "vm-amd-kvm-no-power-pmu.txt").read_text()
    with pytest.raises(energy.EnergyUnavailable, match="no power/energy-pkg/ count"):
        energy.parse_perf(text)
    with pytest.raises(energy.EnergyUnavailable, match="not supported"):
        energy.parse_perf("<not supported>,Joules,power/energy-pkg/,0,100.00,,\n")
    with pytest.raises(energy.EnergyUnavailable, match="expected Joules"):
        energy.parse_perf("12,msec,power/energy-pkg/,1000,100.00,,\n")


@pytest.fixture
def powercap(tmp_path) -> Path:
    root = tmp_path / "powercap"
    shutil.copytree(RAPL / "powercap", root)
    return root


def _write(path: Path, value: int) -> None:
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(f"{value}\n")
    os.replace(tmp, path)  # a reader never sees a half-written counter


def test_powercap_zones_and_wrap_around(powercap):
    zones = energy.zones(powercap)
    assert [(z.path.name, z.name) for z in zones] == [("intel-rapl:0", "package-0"), ("intel-rapl:0:1", "dram")]
    before = energy.read_uj(zones)
    pkg_path, dram_path = powercap / "intel-rapl:0" / "energy_uj", powercap / "intel-rapl:0:1" / "energy_uj"
    _write(pkg_path, 1_671_150)  # 328 850 µJ to the end of the range, then 1 671 150 past 0: 2 J
    _write(dram_path, int(dram_path.read_text()) + 250_000)
    pkg, ram = energy.sysfs_joules(zones, before, energy.read_uj(zones))
    assert pkg == pytest.approx(2.0, abs=1e-9)
    assert ram == pytest.approx(0.25, abs=1e-9)
    assert energy.delta_uj(10, 25, 100) == 15
    assert energy.delta_uj(90, 5, 100) == 15


def test_powercap_missing_files(powercap, tmp_path):
    with pytest.raises(energy.EnergyUnavailable, match="does not exist .no powercap driver"):
        energy.zones(tmp_path / "nothing")
    (powercap / "intel-rapl:0" / "energy_uj").unlink()
    zones = energy.zones(powercap)
    with pytest.raises(energy.EnergyUnavailable, match="energy_uj does not exist"):
        energy.read_uj(zones)
    shutil.rmtree(powercap / "intel-rapl:0")
    with pytest.raises(energy.EnergyUnavailable, match="no intel-rapl package zone"):
        energy.zones(powercap)


def test_powercap_unreadable_energy_is_unavailable():
    """Current kernels make energy_uj root-only: read as an unprivileged user, it is a reason."""
    with tempfile.TemporaryDirectory(prefix="perfci-rapl-") as tmp:  # /tmp: traversable by any user
        os.chmod(tmp, 0o755)
        powercap = Path(tmp) / "powercap"
        shutil.copytree(RAPL / "powercap", powercap)
        counter = powercap / "intel-rapl:0" / "energy_uj"
        counter.chmod(0o400 if os.geteuid() == 0 else 0o000)
        code = ("import sys; from pathlib import Path; from perfci_agent import energy\n"
                "try:\n    energy.read_uj(energy.zones(Path(sys.argv[1])))\nexcept energy.EnergyUnavailable as e:\n    print(e)")
        cmd = [sys.executable, "-c", code, str(powercap)]
        if os.geteuid() == 0:  # root reads anything: run the reader as nobody for the real EACCES
            cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert "energy_uj is not readable by this user" in out.stdout, out.stderr


def test_probe_names_both_reasons_and_prefers_perf(powercap, tmp_path):
    no_events = tmp_path / "no-power-pmu"
    with pytest.raises(energy.EnergyUnavailable) as exc:
        energy.probe(perf="/usr/bin/perf", powercap=tmp_path / "absent", events=no_events)
    assert "no RAPL PMU" in str(exc.value) and "no powercap driver" in str(exc.value)
    events = tmp_path / "events"
    events.mkdir()
    (events / "energy-pkg").write_text("event=0x02\n")
    paranoid = tmp_path / "paranoid"
    paranoid.write_text("2\n")
    # the power events exist but a user may not open them system-wide: powercap is next
    src = energy.probe(perf="/usr/bin/perf", powercap=powercap, events=events, paranoid=paranoid, euid=1000)
    assert src.kind == "sysfs" and [z.name for z in src.zones] == ["package-0", "dram"]
    assert energy.probe(perf="/usr/bin/perf", powercap=powercap, events=events, paranoid=paranoid, euid=0).kind == "perf"
    paranoid.write_text("0\n")
    assert energy.probe(perf="/usr/bin/perf", powercap=tmp_path / "absent", events=events, paranoid=paranoid, euid=1000).kind == "perf"


def test_other_cpus_busy_from_proc_stat_lines(tmp_path):
    def stat(rows):
        p = tmp_path / "stat"
        p.write_text("cpu  0 0 0 0 0 0 0 0 0 0\n" + "".join(f"cpu{c} {u} 0 {s} {i} 0 0 0 0 0 0\n" for c, (u, s, i) in rows.items()))
        return energy.cpu_times(p)
    before = stat({0: (100, 0, 900), 1: (0, 0, 1000), 2: (50, 0, 950)})
    after = stat({0: (200, 0, 900), 1: (100, 0, 1000), 2: (50, 25, 1025)})  # cpu0 forwards
    assert energy.other_cpus_busy(before, after, lcores=[0]) == pytest.approx((100 + 25) / 100)
    assert energy.other_cpus_busy(before, after, lcores=[0, 1, 2]) is None or energy.other_cpus_busy(before, after, [0, 1, 2]) == 0.0


def test_window_energy_with_the_real_dataplane(scratch_repo, powercap):
    """The agent answers the dataplane's enable/disable like perf and reads the counters then.
    The counter is a stand-in (this VM has no RAPL): a thread advances it at 40 W."""
    r = scratch_repo
    measure(r["repo"], r["base"], backend="tsc", reps=1, config="self-64B-short", cache_dir=r["cache"])
    binary = Workspace(r["repo"], r["cache"]).build(r["base"]).binary
    counter = powercap / "intel-rapl:0" / "energy_uj"
    start_uj, t0, stop = int(counter.read_text()), time.monotonic(), threading.Event()

    def tick() -> None:
        while not stop.is_set():
            _write(counter, (start_uj + int(40e6 * (time.monotonic() - t0))) % 262143328850)  # wraps within a second
            time.sleep(0.001)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        cfg = CONFIGS["self-64B"].model_copy(update={"packets": 10_000_000})
        source = energy.Source("sysfs", zones=tuple(energy.zones(powercap)))
        result, e = energy.run_measured(source, runner.RunSpec(binary, default_core(), cfg, timeout=120.0), [default_core()])
        assert isinstance(e, energy.Energy), e
    finally:
        stop.set()
        ticker.join()
    window_s = energy.window_seconds(result.report)
    assert e.seconds == pytest.approx(window_s, rel=0.5, abs=0.02)  # the agent's clock vs the dataplane's rdtsc
    assert e.pkg_joules / e.seconds == pytest.approx(40.0, rel=0.25)  # 1 ms ticks over a window of ~0.1-0.5 s
    assert e.ram_joules == 0.0 and e.other_cpus_busy is not None and e.loadavg1 is not None
    raw = {**runner.tsc_raw(result.report), "lc.1.packets": 10_000_000.0, "lc.1.busy_cycles": result.report["window"]["cycles"]["busy"],
           "lc.1.window_cycles": result.report["window"]["cycles"]["window"], **e.raw("lc.1")}
    m = scaling.derive(raw)
    assert {"power_w", "energy_per_packet", "roi_power", "roi_cpu", "other_cpus_busy"} <= m.keys()


def test_a_counter_that_vanishes_mid_run_keeps_the_run_and_says_why(scratch_repo, powercap):
    r = scratch_repo
    measure(r["repo"], r["base"], backend="tsc", reps=1, config="self-64B-short", cache_dir=r["cache"])
    binary = Workspace(r["repo"], r["cache"]).build(r["base"]).binary
    source = energy.Source("sysfs", zones=tuple(energy.zones(powercap)))
    (powercap / "intel-rapl:0:1" / "energy_uj").unlink()  # the DRAM counter is gone when the window opens
    result, e = energy.run_measured(source, runner.RunSpec(binary, default_core(), CONFIGS["self-64B-short"], timeout=120.0), [default_core()])
    assert result.report["window"]["packets"]["rx"] == CONFIGS["self-64B-short"].packets
    assert isinstance(e, energy.EnergyUnavailable) and "energy_uj does not exist" in str(e)


def test_perf_path_with_the_real_dataplane_and_a_perf_stand_in(scratch_repo, tmp_path):
    """perf's power events, as the agent wraps a run with them; perf itself is a stand-in (this VM
    has no RAPL PMU) that speaks perf's control protocol and prints perf's CSV."""
    r = scratch_repo
    measure(r["repo"], r["base"], backend="tsc", reps=1, config="self-64B-short", cache_dir=r["cache"])
    binary = Workspace(r["repo"], r["cache"]).build(r["base"]).binary
    perf = tmp_path / "perf"
    perf.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).parent / 'helpers' / 'rapl_perf_standin.py'} \"$@\"\n")
    perf.chmod(0o755)
    cfg = CONFIGS["self-64B"].model_copy(update={"packets": 10_000_000})
    result, e = energy.run_measured(energy.Source("perf", perf=str(perf)), runner.RunSpec(binary, default_core(), cfg, timeout=120.0),
                                    [default_core()])
    assert isinstance(e, energy.Energy), e
    assert result.argv[:3] == [str(perf), "stat", "-a"] and "taskset" in result.argv[result.argv.index("--") + 1]
    assert e.seconds == energy.window_seconds(result.report)  # the dataplane's window, not perf's runtime column
    assert e.pkg_joules / e.seconds == pytest.approx(40.0, rel=0.3) and e.ram_joules / e.pkg_joules == pytest.approx(0.1, rel=0.1)
