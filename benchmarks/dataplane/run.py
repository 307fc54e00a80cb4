#!/usr/bin/env python3
"""Forwarding speed of perfci-fwd against its peers, on the same input and the same core.

For one pcap replayed forever by net_pcap (infinite_rx=1) and transmitted back out of the same
port (net_pcap drops it: no TX cost), each app forwards on one pinned core for a fixed time:

- dpdk-testpmd in io mode: the floor, driver cost alone (no packet is even read);
- DPDK's own l3fwd example in LPM mode, built here from Debian's dpdk-doc sources (not kept);
- perfci-fwd with the same 16 routes as l3fwd's built-in table.

Throughput comes from the port counters read through DPDK telemetry at the start and end of
the measured interval, the same way for all three; cycles/packet = TSC Hz / packets per second
(wall cycles of the forwarding core, RX driver included). perfci-fwd's own busy cycles/packet
is printed too, and the self-fed harness's figures (tsc cycles/packet, callgrind instructions
per packet of fwd_burst) close the table: with the built-in 16-route table, with a large generated
table (--routes-generate, flows spread over it), and with 10 % of flows unroutable (--miss-pct 10:
the instructions a dropped packet costs).

    .venv/bin/python benchmarks/dataplane/run.py [--seconds 3] [--reps 3] [--self-only] [--baseline-fwd FILE] [--smoke]

``--baseline-fwd FILE`` builds a second perfci-fwd with FILE in place of dataplane/src/fwd.c (e.g.
``git show REV:dataplane/src/fwd.c > /tmp/fwd.c``) and runs the self-fed cases on both, alternating.

The run fails (exit 1) when an app's port counters did not move over the measured interval or a
self-fed run forwarded no packet: a rate of nothing. ``--smoke``: the self-fed harness alone, one
run per case of 200 000 packets (callgrind: 10 000).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from perfci_agent.workspace import compile_tree
from perfci_core.analysis.compare import compare

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: the benchmarks package
from benchmarks.premise import fail, require

REPO = Path(__file__).resolve().parents[2]

EXAMPLES = Path("/usr/share/dpdk/examples")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "perfci-bench"
L3FWD_ROUTES = [f"198.18.{i}.0/24" for i in range(16)]  # l3fwd's built-in IPv4 LPM table
# The large table: 16384 generated routes (/24s scattered over the address space, 1 in 16 a /32), with
# 4096 flows (= the mbufs in flight) so that every packet in flight looks up its own tbl24 line and page.
# Lookups cost the same with more routes: tbl24 is 64 MiB whatever the table holds, and what the
# traffic touches of it is bounded by the flows in flight (4096 scattered lines and pages here);
# installing is O(n^2) in rte_lpm_add (65536 routes: 4 s, 1M: ~20 min; under valgrind 50x more).
LARGE_TABLE = ["--routes-generate", "16384", "--flows", "4096"]
MISSES = ["--miss-pct", "10"]


def core() -> int:
    return max(os.sched_getaffinity(0))


def hugepages() -> bool:
    hp = Path("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
    return hp.exists() and int(hp.read_text()) >= 128 and os.path.ismount("/dev/hugepages")


def eal(prefix: str, pcap: Path, lcores: str) -> list[str]:
    # --huge-unlink: no hugepage files are left behind, even by a killed process
    mem = ["-m", "256", "--huge-unlink"] if hugepages() else ["--no-huge", "-m", "512"]
    return ["-l", lcores, "--no-pci", *mem, f"--file-prefix={prefix}", "--log-level=lib.*:error",
            f"--vdev=net_pcap0,rx_pcap={pcap},infinite_rx=1"]


def make_pcap(path: Path, flows: int = 1024) -> None:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    from scapy.utils import wrpcap

    packets = []
    for i in range(flows):
        p = (Ether(src="02:00:00:00:aa:01", dst="02:00:00:00:aa:02")
             / IP(src=f"10.{i >> 8}.{i & 255}.1", dst=f"198.18.0.{1 + i % 254}", ttl=64)
             / UDP(sport=1024 + i, dport=9))
        packets.append(p / Raw(b"\0" * (60 - len(p))))  # 60 bytes + 4 FCS = 64 on the wire
    wrpcap(str(path), packets)


class Telemetry:
    """DPDK telemetry v2 client: JSON over a SOCK_SEQPACKET unix socket of the process."""

    def __init__(self, prefix: str, timeout: float = 30.0):
        path = Path("/var/run/dpdk") / prefix / "dpdk_telemetry.v2"
        deadline = time.monotonic() + timeout
        while not path.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"no telemetry socket at {path}")
            time.sleep(0.05)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(str(path))
        self.max_len = json.loads(self.sock.recv(4096))["max_output_len"]

    def stats(self, port: int = 0) -> dict:
        self.sock.send(f"/ethdev/stats,{port}".encode())
        return json.loads(self.sock.recv(self.max_len))["/ethdev/stats"]

    def close(self) -> None:
        self.sock.close()


def wait_for_traffic(tm: Telemetry, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not (tm.stats() or {}).get("opackets"):  # null until the port is set up
        if time.monotonic() > deadline:
            raise RuntimeError("the app forwards nothing")
        time.sleep(0.05)


def measure(cmd: list[str], prefix: str, seconds: float, warmup: float, stdin=None) -> tuple[float, subprocess.Popen]:
    """Mpps over `seconds` after `warmup`, from the port counters; returns (Mpps, process)."""
    proc = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tm = None
    try:
        tm = Telemetry(prefix)
        wait_for_traffic(tm)
        time.sleep(warmup)
        s0, t0 = tm.stats(), time.monotonic()
        time.sleep(seconds)
        s1, t1 = tm.stats(), time.monotonic()
    except BaseException:  # noqa: BLE001 - the dataplane is stopped whatever ended the measurement
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise RuntimeError(f"{Path(cmd[0]).name} failed: {err[-1500:]}") from None
    finally:
        if tm is not None:
            tm.close()
    sent = s1["opackets"] - s0["opackets"]
    if sent <= 0:
        proc.kill()
        proc.communicate(timeout=30)
        fail(f"{Path(cmd[0]).name} sent no packet in {t1 - t0:.1f} s")
    return sent / (t1 - t0) / 1e6, proc


def stop(proc: subprocess.Popen, enter: bool = False) -> str:
    if enter:
        proc.stdin.write("\n")
        proc.stdin.flush()
    else:
        proc.terminate()
    out, err = proc.communicate(timeout=60)
    if proc.returncode not in (0, -15):
        raise RuntimeError(f"exit {proc.returncode}: {err[-2000:]}")
    return out


def build_l3fwd() -> Path:
    """DPDK's l3fwd from the dpdk-doc sources, built with its own Makefile outside the repo."""
    src = EXAMPLES / "l3fwd"
    if not src.exists():
        raise RuntimeError("no l3fwd sources: apt-get install dpdk-doc")
    work = CACHE / "l3fwd-src"
    binary = work / "l3fwd" / "build" / "l3fwd"
    if not binary.exists():
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        shutil.copytree(src, work / "l3fwd")
        shutil.copytree(EXAMPLES / "common", work / "common")
        # 22.11's l3fwd requests RX checksum offload unconditionally; net_pcap (like every
        # virtual PMD) has none, so configure fails. Later DPDK masks it by capability: do the
        # same here, in the scratch copy only.
        main_c = work / "l3fwd" / "main.c"
        text = main_c.read_text()
        wanted = ".offloads = RTE_ETH_RX_OFFLOAD_CHECKSUM,"
        if wanted not in text:
            raise RuntimeError("l3fwd sources changed: cannot disable RX checksum offload")
        main_c.write_text(text.replace(wanted, ".offloads = 0,"))
        subprocess.run(["make", "-C", str(work / "l3fwd"), "-j2"], check=True, capture_output=True)
    return binary


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="measured interval per run")
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=3, help="runs per app (median reported)")
    ap.add_argument("--self-only", action="store_true", help="only the self-fed harness's figures (no peers)")
    ap.add_argument("--baseline-fwd", type=Path, help="also measure the self-fed cases with this fwd.c")
    ap.add_argument("--smoke", action="store_true", help="the self-fed harness alone, one short run per case")
    args = ap.parse_args()
    if args.smoke:
        args.self_only = True

    fwd = compile_tree(REPO / "dataplane", REPO / "dataplane" / "build")
    with tempfile.TemporaryDirectory(prefix="perfci-bench-") as tmp_s:
        builds = {"this tree": fwd}
        if args.baseline_fwd:
            builds = {"baseline": build_with_fwd(args.baseline_fwd, Path(tmp_s)), **builds}
        if args.smoke:
            self_fed(builds, core(), Path(tmp_s), 1, packets=200_000, sim_packets=10_000)
        else:
            self_fed(builds, core(), Path(tmp_s), max(args.reps, 5))
    if args.self_only:
        return 0
    l3fwd = build_l3fwd()
    lc = core()
    tmp = Path(tempfile.mkdtemp(prefix="perfci-bench-"))
    pcap = tmp / "in.pcap"
    make_pcap(pcap)
    routes = tmp / "routes.txt"
    routes.write_text("".join(f"{r} 02:00:00:00:00:{i:02x}\n" for i, r in enumerate(L3FWD_ROUTES)))
    tsc_hz = None
    results: dict[str, list[float]] = {"dpdk-testpmd io": [], "l3fwd lpm": [], "perfci-fwd": []}
    busy_cpp: list[float] = []

    print(f"core {lc}, {'hugepages' if hugepages() else '--no-huge'}, 64-byte frames, "
          f"{args.seconds:g} s per run, {args.reps} runs per app", flush=True)
    for rep in range(args.reps):
        p = f"b{uuid.uuid4().hex[:8]}"
        cmd = ["dpdk-testpmd", *eal(p, pcap, f"{(lc + 1) % os.cpu_count()},{lc}"), "--",
               "--forward-mode=io", "--nb-cores=1", "--auto-start", "--no-flush-rx"]
        mpps, proc = measure(cmd, p, args.seconds, args.warmup, stdin=subprocess.PIPE)
        stop(proc, enter=True)
        results["dpdk-testpmd io"].append(mpps)

        p = f"b{uuid.uuid4().hex[:8]}"
        cmd = [str(l3fwd), *eal(p, pcap, str(lc)), "--", "-p", "0x1", "-P", f"--config=(0,0,{lc})",
               "--lookup=lpm", "--parse-ptype"]
        mpps, proc = measure(cmd, p, args.seconds, args.warmup)
        stop(proc)
        results["l3fwd lpm"].append(mpps)

        p = f"b{uuid.uuid4().hex[:8]}"
        cmd = [str(fwd), *eal(p, pcap, str(lc)), "--", "--harness", "ports", "--routes", str(routes),
               "--warmup", "0", "--packets", str(10**13)]
        mpps, proc = measure(cmd, p, args.seconds, args.warmup)
        report = json.loads(stop(proc))
        w = report["window"]
        results["perfci-fwd"].append(mpps)
        busy_cpp.append(w["cycles"]["busy"] / w["packets"]["rx"])
        tsc_hz = report["tsc_hz"]

    floor = median(results["dpdk-testpmd io"])
    l3 = median(results["l3fwd lpm"])
    cpp = {name: [tsc_hz / (x * 1e6) for x in xs] for name, xs in results.items()}
    print(f"\n{'app':<18} {'Mpps':>8} {'cycles/pkt':>11} {'range':>13} {'vs l3fwd':>9} {'vs testpmd':>11}")
    for name, xs in results.items():
        mpps = median(xs)
        print(f"{name:<18} {mpps:8.2f} {median(cpp[name]):11.1f} {min(cpp[name]):6.1f}-{max(cpp[name]):<6.1f}"
              f" {l3 / mpps:8.2f}x {floor / mpps:10.2f}x")
    v = compare(cpp["l3fwd lpm"], cpp["perfci-fwd"], "cpp", backend="tsc", min_effect=0.01)
    print(f"perfci-fwd vs l3fwd cycles/packet: {v.verdict.value} ({v.rel_change:+.1%}, p={v.p_value:.3g}, "
          f"1 % minimum effect, {len(cpp['perfci-fwd'])} runs each)")
    print(f"\nperfci-fwd busy cycles/packet on the pcap input (its own tsc accounting): {median(busy_cpp):.1f}")
    print(f"forwarding work above the driver floor, cycles/packet: "
          f"l3fwd {tsc_hz / (l3 * 1e6) - tsc_hz / (floor * 1e6):.1f}, "
          f"perfci-fwd {tsc_hz / (median(results['perfci-fwd']) * 1e6) - tsc_hz / (floor * 1e6):.1f}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


def self_fed(builds: dict[str, Path], lc: int, tmp: Path, reps: int, packets: int = 5_000_000, sim_packets: int = 100_000) -> None:
    """The self-fed harness: pure forwarding cost (tsc; every build and case in turn, rep after rep,
    so that drift on a shared machine hits them alike) and the exact instruction count (callgrind)."""
    cases = {"16 routes": [], "large table": LARGE_TABLE, "10 % misses": MISSES}
    cpp: dict[tuple[str, str], list[float]] = {(b, c): [] for b in builds for c in cases}
    for _ in range(reps):
        for (build, name), xs in cpp.items():
            out = subprocess.run([str(builds[build]), "-l", str(lc), "--no-huge", "-m", "512", "--no-pci",
                                  f"--file-prefix=b{uuid.uuid4().hex[:8]}", "--log-level=lib.*:error", "--",
                                  "--packets", str(packets), "--warmup", str(packets // 10), *cases[name]],
                                 capture_output=True, text=True, check=True).stdout
            w = json.loads(out)["window"]
            require(w["packets"]["rx"] > 0, f"{build}, {name}: the self-fed run forwarded no packet")
            xs.append(w["cycles"]["busy"] / w["packets"]["rx"])
    print(f"\nself-fed harness, core {lc}, load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs, "
          f"median and range of {reps} runs each:")
    print(f"{'build':<10} {'case':<14} {'tsc cycles/pkt':>15} {'range':>15} {'instructions/pkt':>17}")
    for build, binary in builds.items():
        ipp, dropped = {}, {}
        for name, extra in cases.items():
            ipp[name], dropped[name] = callgrind_ipp(binary, lc, tmp, sim_packets, *extra)
            require(ipp[name] > 0, f"{build}, {name}: callgrind counted no instruction in fwd_burst")
            xs = cpp[(build, name)]
            print(f"{build:<10} {name:<14} {median(xs):15.2f} {min(xs):7.2f}-{max(xs):<7.2f} {ipp[name]:17.4f}")
        share = dropped["10 % misses"]
        print(f"{build:<10} a dropped packet costs {(ipp['10 % misses'] - ipp['16 routes']) / share:+.1f} instructions "
              f"over a forwarded one ({100 * share:.1f} % dropped: {ipp['16 routes']:.2f} -> {ipp['10 % misses']:.2f} per packet)")
    print("(instructions/packet: callgrind, fwd_burst, every call counted)")


def build_with_fwd(fwd_c: Path, tmp: Path) -> Path:
    """This tree's dataplane with another fwd.c."""
    root = tmp / "baseline"
    def top_builds(d, names):
        return [n for n in names if Path(d) == REPO / "dataplane" and n.startswith("build")]
    shutil.copytree(REPO / "dataplane", root / "dataplane", ignore=top_builds)
    shutil.copy(fwd_c, root / "dataplane" / "src" / "fwd.c")
    return compile_tree(root / "dataplane", root / "build")


def callgrind_ipp(fwd: Path, lc: int, tmp: Path, packets: int, *extra: str) -> tuple[float, float]:
    """(instructions per packet of fwd_burst, share of packets dropped), counting every call."""
    out = tmp / "callgrind.out"
    run = subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=fwd_burst",
                          f"--callgrind-out-file={out}", str(fwd), "-l", str(lc), "--no-huge", "-m", "512",
                          "--no-pci", f"--file-prefix=b{uuid.uuid4().hex[:8]}", "--log-level=lib.*:error", "--",
                          "--packets", str(packets), "--warmup", "1000", *extra], capture_output=True, text=True, check=True)
    report = json.loads(run.stdout)
    w = report["window"]["packets"]
    from perfci_agent.backends.sim import parse_callgrind_total  # the agent's one callgrind reader

    return parse_callgrind_total(out.read_text()) / report["total"]["fwd_packets"], sum(w["dropped"].values()) / w["rx"]


if __name__ == "__main__":
    sys.exit(main())
