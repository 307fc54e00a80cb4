"""Forwarding on several lcores: one RX/TX queue pair each, per-lcore counters in the report.

This VM has two CPUs, so two lcores is the most these tests run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from perfci_agent import runner
from perfci_core.result import BenchConfig

from .fwd import eal_args, forwarding_core, run_fwd, sigterm_in_window

DATA = Path(__file__).parent / "data"
LCORE_KEYS = {"lcore", "port", "queue", "packets", "polls", "cycles"}


def two_cores() -> list[int]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip(f"needs two CPUs for two lcores; this process may run on {cpus} only")
    return cpus[-2:]


def lcores_eal(cores: list[int], *extra: str) -> list[str]:
    args = eal_args(*extra)
    args[args.index("-l") + 1] = ",".join(map(str, cores))
    return args


def shape(value):
    """The report's structure: keys and value types, not values."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    return type(value).__name__


def assert_lcores_add_up(report: dict) -> None:
    """The top-level window is the sum of the lcores' windows; each lcore's time is fully accounted."""
    w, lcores = report["window"], report["lcores"]
    assert all(set(lc) == LCORE_KEYS for lc in lcores), lcores
    assert sum(lc["packets"]["rx"] for lc in lcores) == w["packets"]["rx"]
    assert sum(lc["packets"]["tx"] for lc in lcores) == w["packets"]["tx"]
    assert sum(lc["packets"]["dropped"] for lc in lcores) == sum(w["packets"]["dropped"].values())
    for key in ("busy", "empty"):
        assert sum(lc["polls"][key] for lc in lcores) == w["polls"][key]
    for key in ("busy", "idle", "harness"):
        assert sum(lc["cycles"][key] for lc in lcores) == w["cycles"][key]
    for lc in lcores:
        c = lc["cycles"]
        assert c["busy"] + c["idle"] + c["harness"] == c["window"], lc
        assert 0 < c["window"] <= w["cycles"]["window"], (lc, w["cycles"])
    assert len({(lc["port"], lc["queue"]) for lc in lcores}) == len(lcores)  # a queue pair each
    if report["config"]["harness"] == "self":  # and a net_ring port each: no counter line shared
        assert sorted(lc["port"] for lc in lcores) == list(range(len(lcores))) and {lc["queue"] for lc in lcores} == {0}


def test_one_lcore_report_keeps_every_field_and_count(fwd_bin):
    """Same options, same counts and the same fields as the single-lcore dataplane recorded before
    lcores existed (data/report-one-lcore-before-multicore.json); only cycles differ run to run."""
    before = json.loads((DATA / "report-one-lcore-before-multicore.json").read_text())
    after = run_fwd(fwd_bin, eal_args(), ["--packets", "200000", "--warmup", "10000"]).report
    lcores = after.pop("lcores")
    before["lcore"] = after["lcore"] = 0  # the recording ran on core 1
    before["build_id"] = after["build_id"]
    before["tsc_hz"] = after["tsc_hz"]
    assert shape(after) == shape(before)
    for cycles in (before["window"].pop("cycles"), after["window"].pop("cycles")):
        assert cycles["busy"] + cycles["idle"] + cycles["harness"] == cycles["window"]
    assert after == before  # packets, polls, drops, totals: deterministic on one lcore
    assert len(lcores) == 1 and lcores[0]["queue"] == 0 and lcores[0]["lcore"] == forwarding_core()
    assert lcores[0]["packets"] == {"rx": 200000, "tx": 200000, "dropped": 0}


def test_two_lcores_forward_every_packet_once(fwd_bin):
    cores = two_cores()
    report = run_fwd(fwd_bin, lcores_eal(cores), ["--packets", "400001", "--warmup", "20000"]).report
    lcores = report["lcores"]
    assert [lc["lcore"] for lc in lcores] == cores and report["lcore"] == cores[0]
    assert report["config"]["packets"] == 400001 and report["stop_reason"] == "packets"
    assert_lcores_add_up(report)
    # an even split of --packets, each lcore up to a burst over its share (whole bursts)
    for lc, share in zip(lcores, (200001, 200000)):
        assert share <= lc["packets"]["rx"] < share + 32, lc
        assert lc["packets"]["tx"] == lc["packets"]["rx"] and lc["packets"]["dropped"] == 0, lc
    w = report["window"]["packets"]
    assert w["tx"] == w["rx"] == sum(lc["packets"]["rx"] for lc in lcores)
    # both lcores warmed up before the window; the total counts every fwd_burst call of both
    assert report["total"]["fwd_packets"] >= w["rx"] + 2 * 20000
    assert report["total"]["fwd_calls"] * 32 == report["total"]["fwd_packets"]


def test_two_lcores_split_drops_like_the_flows(fwd_bin):
    cores = two_cores()
    report = run_fwd(fwd_bin, lcores_eal(cores), ["--packets", "200000", "--warmup", "0", "--miss-pct", "25",
                                                  "--flows", "64"]).report
    assert_lcores_add_up(report)
    p = report["window"]["packets"]
    assert p["tx"] + p["dropped"]["no_route"] == p["rx"]
    # 16 of 64 flows have no route; RSS spreads them over both queues
    assert p["dropped"]["no_route"] == pytest.approx(0.25 * p["rx"], rel=0.3)
    assert all(lc["packets"]["dropped"] > 0 and lc["packets"]["tx"] > 0 for lc in report["lcores"])


def test_two_lcores_idle_split_the_polls(fwd_bin):
    cores = two_cores()
    report = run_fwd(fwd_bin, lcores_eal(cores), ["--idle", "--idle-polls", "100001", "--warmup", "1000"]).report
    assert report["stop_reason"] == "idle_polls"
    assert [lc["polls"]["empty"] for lc in report["lcores"]] == [50001, 50000]
    assert_lcores_add_up(report)


def test_too_few_flows_for_the_lcores_is_refused(fwd_bin):
    run = run_fwd(fwd_bin, lcores_eal(two_cores()), ["--flows", "1"])
    assert run.returncode == 2 and run.stdout == ""
    assert "--flows 1 leaves one of the 2 lcores' queues without a flow" in run.stderr


def test_ports_harness_spreads_over_rss_queues(fwd_bin):
    """net_null answers an RSS configuration and fills every RX queue (with all-zero frames, which the
    forwarder drops as not IPv4): each lcore polls its own queue and counts its own packets."""
    cores = two_cores()
    report = run_fwd(fwd_bin, lcores_eal(cores, "--vdev=net_null0,copy=1"),
                     ["--harness", "ports", "--packets", "100000", "--warmup", "1000"]).report
    assert_lcores_add_up(report)
    assert all(lc["packets"]["rx"] >= 50000 for lc in report["lcores"])
    assert report["window"]["packets"]["dropped"]["not_ipv4"] == report["window"]["packets"]["rx"]


def test_ports_harness_without_rss_refuses_several_lcores(fwd_bin, tmp_path):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    pcap = tmp_path / "in.pcap"
    wrpcap(str(pcap), [Ether() / IP(dst="10.1.1.1") / UDP()])
    run = run_fwd(fwd_bin, lcores_eal(two_cores(), f"--vdev=net_pcap0,rx_pcap={pcap},tx_pcap={tmp_path / 'out.pcap'}"),
                  ["--harness", "ports", "--packets", "10"])
    assert run.returncode == 2 and run.stdout == ""
    assert "net_pcap" in run.stderr and ("has no RSS" in run.stderr or "RX / " in run.stderr), run.stderr


def test_runner_pins_and_passes_every_core(fwd_bin, tmp_path):
    cores = two_cores()
    spec = runner.RunSpec(fwd_bin, cores[0], BenchConfig(packets=100_000, warmup=1_000), cores=cores, workdir=tmp_path)
    argv = spec.argv(tmp_path / "r.json")
    wanted = ",".join(map(str, cores))
    assert argv[argv.index("-c") + 1] == wanted and argv[argv.index("-l") + 1] == wanted
    result = runner.run(spec)
    assert [lc["lcore"] for lc in result.report["lcores"]] == cores
    one = runner.RunSpec(fwd_bin, cores[1], BenchConfig())
    assert one.core_list == str(cores[1])
    with pytest.raises(ValueError, match="not among the forwarding cores"):
        runner.RunSpec(fwd_bin, 7, BenchConfig(), cores=[0, 1])


def test_two_lcores_stop_together_on_duration_and_on_sigterm(fwd_bin):
    cores = two_cores()
    report = run_fwd(fwd_bin, lcores_eal(cores), ["--packets", str(10**12), "--duration", "0.3"]).report
    assert report["stop_reason"] == "duration"
    assert_lcores_add_up(report)
    assert all(lc["packets"]["rx"] > 0 for lc in report["lcores"])

    report = sigterm_in_window(fwd_bin, lcores_eal(cores), ["--packets", str(10**12)]).report
    assert report["stop_reason"] == "signal"
    assert_lcores_add_up(report)
