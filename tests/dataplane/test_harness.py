"""The self-fed harness, idle calibration, hugepages, perf window gating and signals."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from perfci_agent import runner

from .fwd import eal_args, file_prefix, run_fwd, sigterm_in_window


def test_self_fed_report_is_complete_and_consistent(fwd_bin):
    report = run_fwd(fwd_bin, eal_args(), ["--packets", "2000000", "--warmup", "100000"]).report
    assert report["schema"] == "perfci-fwd.report/1"
    assert report["mode"] == "forward" and report["stop_reason"] == "packets"
    assert report["dpdk_version"].startswith("DPDK 22.11")
    assert re.fullmatch(r"[0-9a-f]{12}(-dirty)?|v?\d.*|unknown", report["build_id"])
    assert report["config"]["harness"] == "self" and report["config"]["burst"] == 32
    w = report["window"]
    assert 2_000_000 <= w["packets"]["rx"] < 2_000_000 + 32
    assert w["packets"]["tx"] == w["packets"]["rx"]
    assert sum(w["packets"]["dropped"].values()) == 0
    c = w["cycles"]
    # every TSC cycle of the window is a busy poll, an empty poll or harness refill
    assert c["busy"] + c["idle"] + c["harness"] == c["window"]
    assert w["polls"]["busy"] * 32 == w["packets"]["rx"]  # the ring is never short
    # cycles per packet: at least a few (a floor no machine beats); no ceiling, a loaded host has none
    assert c["busy"] / w["packets"]["rx"] > 2
    total = report["total"]
    assert total["fwd_packets"] >= w["packets"]["rx"] + 100_000
    assert total["fwd_calls"] * 32 == total["fwd_packets"]


def test_miss_pct_drops_unroutable_flows(fwd_bin):
    report = run_fwd(fwd_bin, eal_args(), ["--packets", "200000", "--warmup", "0", "--miss-pct", "25",
                                           "--flows", "64"]).report
    p = report["window"]["packets"]
    # 16 of 64 flows unroutable, and the mix holds while packets are recycled
    assert p["dropped"]["no_route"] == pytest.approx(0.25 * p["rx"], rel=0.05)
    assert p["tx"] + p["dropped"]["no_route"] == p["rx"]


@pytest.mark.parametrize("pkt_size", [64, 512, 1518])
def test_packet_sizes(fwd_bin, pkt_size):
    report = run_fwd(fwd_bin, eal_args(), ["--packets", "100000", "--pkt-size", str(pkt_size)]).report
    assert report["config"]["pkt_size"] == pkt_size
    assert report["window"]["packets"]["tx"] == report["window"]["packets"]["rx"] >= 100000


def test_cold_data_keeps_forwarding_correct(fwd_bin):
    report = run_fwd(fwd_bin, eal_args(), ["--packets", "200000", "--cold-data"]).report
    assert report["config"]["cold_data"] is True
    p = report["window"]["packets"]
    assert p["tx"] == p["rx"] >= 200000 and sum(p["dropped"].values()) == 0


def test_idle_mode_counts_empty_polls_only(fwd_bin):
    report = run_fwd(fwd_bin, eal_args(), ["--idle", "--idle-polls", "200000", "--warmup", "1000"]).report
    w = report["window"]
    assert report["mode"] == "idle" and report["stop_reason"] == "idle_polls"
    assert w["packets"]["rx"] == 0 and w["polls"]["busy"] == 0
    assert w["polls"]["empty"] == 200000
    assert w["cycles"]["idle"] > 0 and w["cycles"]["busy"] == 0


def test_duration_closes_the_window(fwd_bin):
    report = run_fwd(fwd_bin, eal_args(), ["--packets", str(10**12), "--duration", "0.3"]).report
    assert report["stop_reason"] == "duration"
    seconds = report["window"]["cycles"]["window"] / report["tsc_hz"]
    assert 0.3 <= seconds < 0.5


def test_runs_on_hugepages(fwd_bin):
    hp = Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
    assert int(hp.read_text()) >= 128 and os.path.ismount("/dev/hugepages"), (
        "no 2 MiB hugepages on /dev/hugepages: run `bash .ci/services` as root")
    report = run_fwd(fwd_bin, eal_args(hugepages=True), ["--packets", "1000000"]).report
    assert report["window"]["packets"]["tx"] >= 1000000


def test_sigterm_closes_the_window_and_reports(fwd_bin):
    report = sigterm_in_window(fwd_bin, eal_args(), ["--packets", str(10**12)]).report
    assert report["stop_reason"] == "signal"
    assert report["window"]["packets"]["rx"] > 0


def test_the_runtime_files_go_when_the_dataplane_ends(fwd_bin):
    """EAL leaves 6.5 MB of runtime files a run; the dataplane removes them as it exits, after its
    count or on SIGTERM (a killed one's are removed by the agent's runner: tests/agent)."""
    eal = eal_args()
    rundir = runner.eal_runtime_dir(file_prefix(eal))
    seen = []
    report = sigterm_in_window(fwd_bin, eal, ["--packets", str(10**12)], in_window=lambda: seen.append(rundir.is_dir())).report
    assert seen == [True] and report["stop_reason"] == "signal"  # where the runner looks is where EAL put them
    assert not rundir.exists()
    eal = eal_args()
    assert run_fwd(fwd_bin, eal, ["--packets", "1000"]).report["stop_reason"] == "packets"
    assert not runner.eal_runtime_dir(file_prefix(eal)).exists()


@pytest.mark.parametrize("nb_lcores", [1, 2])
def test_perf_control_counts_only_the_window(fwd_bin, tmp_path, nb_lcores):
    """perf stat -D -1 --control fd:CTL,ACK with the dataplane's --perf-ctl/--perf-ack.

    Software events stand in for PMU events, which these VMs lack. Page faults decide, because
    their count does not depend on how busy the machine is: EAL start-up faults in its memory
    (thousands of faults), the warmed-up forwarding loop does not, so a gated count far below the
    whole process's proves the start-up was left out; task-clock above zero proves the window was
    counted. The counted time over the window's length is a figure of
    benchmarks/dataplane/timed_checks.py, not an assertion (a loaded host deschedules the loop).
    With two lcores the window opens once both have warmed up and closes when both are done.
    """
    perf = shutil.which("perf")
    assert perf, "linux-perf is not installed"
    cpus = sorted(os.sched_getaffinity(0))[-nb_lcores:]
    if len(cpus) < nb_lcores:
        pytest.skip(f"needs {nb_lcores} CPUs; this process may run on {cpus} only")
    eal = eal_args()
    eal[eal.index("-l") + 1] = ",".join(map(str, cpus))
    app = ["--packets", str(10**12), "--duration", "0.3", "--warmup", "1000000"]
    whole = subprocess.run([perf, "stat", "-x,", "-e", "task-clock,page-faults", "--", str(fwd_bin), *eal, "--", *app],
                           capture_output=True, text=True, timeout=120)
    assert whole.returncode == 0, whole.stderr
    ctl, ack = tmp_path / "ctl", tmp_path / "ack"
    os.mkfifo(ctl)
    os.mkfifo(ack)
    # both FIFOs opened read-write by the parent so neither open blocks; the child inherits them
    ctl_fd = os.open(ctl, os.O_RDWR)
    ack_fd = os.open(ack, os.O_RDWR)
    try:
        cmd = [perf, "stat", "-x,", "-e", "task-clock,page-faults", "-D", "-1", "--control", f"fd:{ctl_fd},{ack_fd}",
               "--", str(fwd_bin), *eal, "--", *app, "--perf-ctl", str(ctl_fd), "--perf-ack", str(ack_fd)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, pass_fds=(ctl_fd, ack_fd))
    finally:
        os.close(ctl_fd)
        os.close(ack_fd)
    assert proc.returncode == 0, proc.stderr
    assert "Events enabled" in proc.stderr and "Events disabled" in proc.stderr

    def counts(stderr: str) -> dict[str, float]:
        return {f[2]: float(f[0]) for f in (ln.split(",") for ln in stderr.splitlines()) if len(f) > 3 and f[2] in ("task-clock", "page-faults")}

    gated, ungated = counts(proc.stderr), counts(whole.stderr)
    assert gated["task-clock"] > 0, gated  # the window was counted
    assert ungated["page-faults"] > 1000, ungated  # start-up faults in EAL memory
    assert gated["page-faults"] < 0.05 * ungated["page-faults"], (gated, ungated)  # ...and the gated count left them out
    report = json.loads(proc.stdout)
    assert len(report["lcores"]) == nb_lcores and all(lc["packets"]["rx"] > 0 for lc in report["lcores"])
