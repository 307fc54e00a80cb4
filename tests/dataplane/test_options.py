"""Route files and options: clear errors, exit status 2, before any EAL work."""

from __future__ import annotations

import pytest

from .fwd import eal_args, run_fwd

GOOD = "10.0.0.0/8 02:00:00:00:00:01\n"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("10.0.0.0 02:00:00:00:00:01", "prefix needs a length (PREFIX/LEN)"),
        ("10.0.0.256/8 02:00:00:00:00:01", "bad IPv4 prefix"),
        ("10.0.0.0/33 02:00:00:00:00:01", "prefix length must be 1-32"),
        ("10.0.0.0/0 02:00:00:00:00:01", "prefix length must be 1-32"),
        ("10.0.0.0/x 02:00:00:00:00:01", "bad prefix length"),
        ("10.0.0.1/8 02:00:00:00:00:01", "host bits set in prefix"),
        ("10.0.0.0/8 02:00:00:00:01", "bad next-hop MAC (expected xx:xx:xx:xx:xx:xx)"),
        ("10.0.0.0/8 zz:00:00:00:00:01", "bad next-hop MAC (expected xx:xx:xx:xx:xx:xx)"),
        ("10.0.0.0/8", "expected 'PREFIX/LEN NEXT-HOP-MAC'"),
        ("10.0.0.0/8 02:00:00:00:00:01 extra", "extra text after next-hop MAC"),
        ("10.0.0.0/8 02:00:00:00:00:02", "duplicate prefix"),
    ],
)
def test_malformed_route_line_names_file_and_line(fwd_bin, tmp_path, line, reason):
    path = tmp_path / "routes.txt"
    path.write_text("# header comment\n\n" + GOOD + line + "\n")
    run = run_fwd(fwd_bin, eal_args(), ["--routes", str(path)])
    assert run.returncode == 2
    assert run.stderr.strip() == f"{path}:4: {reason}"
    assert run.stdout == ""


def test_too_many_next_hops(fwd_bin, tmp_path):
    path = tmp_path / "routes.txt"
    path.write_text("".join(f"10.{i // 256}.{i % 256}.0/24 02:00:00:00:{i // 256:02x}:{i % 256:02x}\n"
                            for i in range(257)))
    run = run_fwd(fwd_bin, eal_args(), ["--routes", str(path)])
    assert run.returncode == 2
    assert run.stderr.strip() == f"{path}:257: too many distinct next hops (max 256)"


def test_missing_or_empty_route_file(fwd_bin, tmp_path):
    missing = run_fwd(fwd_bin, eal_args(), ["--routes", str(tmp_path / "nope.txt")])
    assert missing.returncode == 2 and "No such file or directory" in missing.stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    run = run_fwd(fwd_bin, eal_args(), ["--routes", str(empty)])
    assert run.returncode == 2 and run.stderr.strip() == f"{empty}: no routes"


@pytest.mark.parametrize(
    "args",
    [
        ["--bogus"],
        ["--harness", "nic"],
        ["--pkt-size", "63"],
        ["--pkt-size", "1519"],
        ["--flows", "0"],
        ["--miss-pct", "101"],
        ["--inflight", "1000"],
        ["--packets", "0"],
        ["--packets", "-5"],
        ["--packets", "12x"],
        ["--duration", "abc"],
        ["--perf-ctl", "7"],
        ["stray"],
    ],
)
def test_bad_option_prints_usage_and_exits_2(fwd_bin, args):
    run = run_fwd(fwd_bin, eal_args(), args)
    assert run.returncode == 2, run.stderr
    assert "usage:" in run.stderr
    assert run.stdout == ""


def test_help_exits_0(fwd_bin):
    run = run_fwd(fwd_bin, [], ["--help"])
    assert run.returncode == 0 and "--routes FILE" in run.stderr


def test_shipped_route_example_loads(fwd_bin):
    from .fwd import DATAPLANE

    example = DATAPLANE / "routes" / "example.txt"
    run = run_fwd(fwd_bin, eal_args(), ["--routes", str(example), "--packets", "1000", "--warmup", "0"])
    report = run.report
    assert report["config"]["routes"] == str(example)
    packets = report["window"]["packets"]
    assert packets["rx"] >= 1000 and packets["tx"] == packets["rx"]  # whole bursts
