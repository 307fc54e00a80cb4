"""--routes-generate: a large route table, forwarded through correctly (spot checks against the
generator's definition in dataplane/src/routes.c, which this file restates)."""

from __future__ import annotations

import ipaddress

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import rdpcap, wrpcap

from .fwd import eal_args, run_fwd

N = 20000  # routes: enough for every kind of entry, quick to install (rte_lpm_add is O(n) per route)


def generated_route(k: int) -> tuple[str, str]:
    """Route k of --routes-generate: a /24 scattered by an odd multiplier, every 16th a /32 inside
    the previous route's /24; next hop 02:00:00:00:02:<k % 16>."""
    net = ((k - (k % 16 == 15)) * 2654435761) & 0xFFFFFF
    if k % 16 == 15:
        prefix = f"{ipaddress.IPv4Address(net << 8 | (1 + k % 254))}/32"
    else:
        prefix = f"{ipaddress.IPv4Address(net << 8)}/24"
    return prefix, f"02:00:00:00:02:{k % 16:02x}"


def test_generated_table_forwards_to_the_longest_prefix(fwd_bin, tmp_path):
    cases = []  # (destination, expected next-hop MAC or None for a drop)
    for k in (0, 1, 14, 15, 16, 4097, 9999, 10015, N - 2, N - 1):
        prefix, mac = generated_route(k)
        net = ipaddress.IPv4Network(prefix)
        if net.prefixlen == 32:
            cases.append((str(net.network_address), mac))  # the host route, through a tbl8
            covering, cmac = generated_route(k - 1)
            other = ipaddress.IPv4Network(covering).network_address + 200
            assert other != net.network_address
            cases.append((str(other), cmac))  # the rest of its /24 still goes to the /24's hop
        else:
            cases.append((str(net.network_address + 77), mac))
    generated = {ipaddress.IPv4Network(generated_route(k)[0]) for k in range(N)}
    missing = next(str(n.network_address + 1) for n in ipaddress.IPv4Network("10.0.0.0/8").subnets(new_prefix=24)
                   if n not in generated)
    cases.append((missing, None))

    sent = [Ether(src="02:aa:00:00:00:01") / IP(src="198.18.0.1", dst=d, ttl=9) / UDP() / Raw(b"x" * 18)
            for d, _ in cases]
    rx, tx = tmp_path / "in.pcap", tmp_path / "out.pcap"
    wrpcap(str(rx), sent)
    report = run_fwd(fwd_bin, eal_args(f"--vdev=net_pcap0,rx_pcap={rx},tx_pcap={tx}"),
                     ["--harness", "ports", "--routes-generate", str(N), "--warmup", "0",
                      "--packets", str(len(sent)), "--duration", "20"], timeout=120).report
    assert report["config"]["routes"] == f"generated:{N}"
    got = list(rdpcap(str(tx)))
    expected = [(d, mac) for d, mac in cases if mac is not None]
    assert [(g[IP].dst, g[Ether].dst) for g in got] == expected
    assert report["window"]["packets"]["dropped"]["no_route"] == 1


def test_generated_table_on_the_self_harness(fwd_bin):
    report = run_fwd(fwd_bin, eal_args(), ["--routes-generate", "4096", "--flows", "4096",
                                           "--packets", "200000", "--warmup", "10000"]).report
    p = report["window"]["packets"]
    assert p["tx"] == p["rx"] >= 200000 and sum(p["dropped"].values()) == 0


def test_routes_and_routes_generate_exclude_each_other(fwd_bin, tmp_path):
    path = tmp_path / "routes.txt"
    path.write_text("10.0.0.0/8 02:00:00:00:00:01\n")
    run = run_fwd(fwd_bin, eal_args(), ["--routes", str(path), "--routes-generate", "10"])
    assert run.returncode == 2 and "--routes and --routes-generate exclude each other" in run.stderr
    run = run_fwd(fwd_bin, eal_args(), ["--routes-generate", "0"])
    assert run.returncode == 2 and "invalid --routes-generate '0'" in run.stderr
