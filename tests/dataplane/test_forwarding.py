"""pcap in -> perfci-fwd -> pcap out, checked packet by packet with scapy."""

from __future__ import annotations

import ipaddress
import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw
from scapy.utils import checksum, rdpcap, wrpcap

from .fwd import eal_args, run_fwd

ROUTES = {
    "10.0.0.0/8": "02:00:00:00:00:0a",
    "10.1.0.0/16": "02:00:00:00:00:0b",
    "10.1.1.0/24": "02:00:00:00:00:0c",
    "10.1.1.128/25": "02:00:00:00:00:0d",
    "10.1.1.200/32": "02:00:00:00:00:0e",
    "192.168.0.0/16": "02:00:00:00:00:0f",
}
SRC = "02:aa:00:00:00:01"


def next_hop(dst: str) -> str | None:
    """Longest-prefix match, the reference for rte_lpm."""
    addr = ipaddress.IPv4Address(dst)
    best = None
    for prefix, mac in ROUTES.items():
        net = ipaddress.IPv4Network(prefix)
        if addr in net and (best is None or net.prefixlen > best[0]):
            best = (net.prefixlen, mac)
    return best[1] if best else None


@pytest.fixture
def routes_file(tmp_path):
    path = tmp_path / "routes.txt"
    lines = ["# test table", ""] + [f"{p:<20} {m}   # hop" for p, m in ROUTES.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def forward(fwd_bin, tmp_path, packets, routes_file=None):
    """Replays packets once through net_pcap; returns (report, output packets)."""
    rx, tx = tmp_path / "in.pcap", tmp_path / "out.pcap"
    wrpcap(str(rx), packets)
    vdev = f"--vdev=net_pcap0,rx_pcap={rx},tx_pcap={tx}"
    app = ["--harness", "ports", "--warmup", "0", "--packets", str(len(packets)), "--duration", "20"]
    if routes_file is not None:
        app += ["--routes", str(routes_file)]
    run = run_fwd(fwd_bin, eal_args(vdev), app)
    report = run.report
    return report, list(rdpcap(str(tx))) if tx.exists() and tx.stat().st_size > 24 else []


def udp(dst, ttl=64, **ip):
    return Ether(src=SRC, dst="02:bb:00:00:00:01") / IP(dst=dst, src="198.18.0.9", ttl=ttl, **ip) / UDP(
        sport=1234, dport=5678) / Raw(b"perfci-payload")


def ones_add(a: int, b: int) -> int:
    s = a + b
    return (s & 0xFFFF) + (s >> 16)


def with_checksum(packet, want: int):
    """The packet with its IPv4 id chosen so that its header checksum is `want`.

    checksum = ~(S0 + id) in one's-complement arithmetic, S0 the sum with id = 0, so
    id = ~want - S0 = ~want + ~S0.
    """
    p = packet.copy()
    p[IP].id = 0
    s0 = 0xFFFF - IP(bytes(p[IP])).chksum  # ~checksum is the sum
    p[IP].id = ones_add(0xFFFF - want, 0xFFFF - s0) & 0xFFFF
    p = Ether(bytes(p))
    assert p[IP].chksum == want or (want == 0 and p[IP].chksum == 0xFFFF), hex(p[IP].chksum)
    return p


def assert_forwarded(sent, got, tx_mac):
    """TTL - 1, a valid checksum, the next hop's MAC and nothing else changed."""
    assert got[Ether].dst == next_hop(sent[IP].dst)
    assert got[Ether].src == tx_mac
    assert got[IP].ttl == sent[IP].ttl - 1
    header = bytes(got[IP])[: got[IP].ihl * 4]
    # equal to a full recomputation, so 0x0000 vs 0xffff (both "zero") is caught too
    canonical = checksum(header[:10] + b"\0\0" + header[12:])
    assert got[IP].chksum == canonical, f"IPv4 checksum {got[IP].chksum:#06x}, expected {canonical:#06x}"
    expected = sent.copy()
    expected[Ether].dst, expected[Ether].src = got[Ether].dst, got[Ether].src
    expected[IP].ttl, expected[IP].chksum = got[IP].ttl, got[IP].chksum
    assert bytes(got) == bytes(expected)


def test_forwards_to_longest_prefix_next_hop(fwd_bin, tmp_path, routes_file):
    dsts = ["10.9.9.9", "10.1.7.7", "10.1.1.1", "10.1.1.129", "10.1.1.200", "10.1.1.201",
            "192.168.44.1", "10.255.255.254"]
    sent = [udp(d, ttl=t) for d in dsts for t in (2, 64, 255)]
    report, got = forward(fwd_bin, tmp_path, sent, routes_file)
    assert len(got) == len(sent)  # order kept, nothing dropped
    for s, g in zip(sent, got):
        assert_forwarded(s, g, report["ports"]["tx_mac"])
    w = report["window"]["packets"]
    assert (w["rx"], w["tx"]) == (len(sent), len(sent))
    assert sum(w["dropped"].values()) == 0
    assert report["stop_reason"] == "packets"


def test_checksum_update_is_exact_for_any_header(fwd_bin, tmp_path, routes_file):
    # RFC 1624: the incremental update must equal a full recomputation for every header,
    # including those whose checksum is near the one's-complement wrap (0x0000/0xfeff...).
    rng = random.Random(1624)
    sent = [udp(f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}",
                ttl=rng.randrange(2, 256), id=rng.randrange(65536), tos=rng.randrange(256))
            for _ in range(300)]
    # headers whose checksum before forwarding sits at the one's-complement wrap
    for want in (0x0000, 0x0001, 0x00FF, 0xFEFF, 0xFF00, 0xFFFE):
        sent.append(with_checksum(udp("10.1.2.3", ttl=17), want))
    report, got = forward(fwd_bin, tmp_path, sent, routes_file)
    assert len(got) == len(sent)
    for s, g in zip(sent, got):
        assert_forwarded(s, g, report["ports"]["tx_mac"])


def test_ip_options_take_the_slow_path_and_are_forwarded(fwd_bin, tmp_path, routes_file):
    sent = [Ether(src=SRC) / IP(dst="10.1.1.5", ttl=9, options=b"\x01\x01\x01\x00") / UDP() / Raw(b"x" * 20)]
    report, got = forward(fwd_bin, tmp_path, sent, routes_file)
    assert len(got) == 1
    assert got[0][IP].ihl == 6
    assert_forwarded(sent[0], got[0], report["ports"]["tx_mac"])


def test_drops_are_counted_by_reason(fwd_bin, tmp_path, routes_file):
    good = udp("10.1.1.7")
    short = Ether(bytes(udp("10.1.1.7"))[:30])  # frame ends inside the IPv4 header
    too_long = Ether(bytes(udp("10.1.1.7")))
    too_long[IP].len = 400
    bad_version = Ether(bytes(udp("10.1.1.7")))
    bad_version[IP].version = 5
    bad_ihl = Ether(bytes(udp("10.1.1.7")))
    bad_ihl[IP].ihl = 4
    cases = {
        "ttl_expired": [udp("10.1.1.7", ttl=1), udp("10.1.1.7", ttl=0)],
        "not_ipv4": [Ether(src=SRC) / ARP(pdst="10.1.1.7"), Ether(src=SRC) / IPv6(dst="::1") / UDP()],
        "bad_ipv4": [short, too_long, bad_version, bad_ihl],
        "no_route": [udp("203.0.113.9"), udp("11.0.0.1")],
    }
    sent = [good] + [p for ps in cases.values() for p in ps] + [good]
    report, got = forward(fwd_bin, tmp_path, sent, routes_file)
    dropped = report["window"]["packets"]["dropped"]
    for reason, ps in cases.items():
        assert dropped[reason] == len(ps), (reason, dropped)
    assert dropped["tx_full"] == 0
    assert len(got) == 2 and all(g[IP].dst == "10.1.1.7" for g in got)
    assert report["window"]["packets"]["tx"] == 2


def test_mixed_burst_forwards_good_packets_around_drops(fwd_bin, tmp_path, routes_file):
    # Bursts mixing drops with good packets take the per-packet path; order must hold.
    rng = random.Random(7)
    sent = []
    for i in range(200):
        kind = rng.random()
        if kind < 0.1:
            sent.append(udp("203.0.113.1"))
        elif kind < 0.2:
            sent.append(udp("10.1.1.9", ttl=1))
        else:
            sent.append(udp(f"10.1.{rng.randrange(256)}.{rng.randrange(1, 255)}", ttl=rng.randrange(2, 200)))
    report, got = forward(fwd_bin, tmp_path, sent, routes_file)
    expected = [p for p in sent if next_hop(p[IP].dst) and p[IP].ttl > 1]
    assert len(got) == len(expected)
    for s, g in zip(expected, got):
        assert_forwarded(s, g, report["ports"]["tx_mac"])
