"""Which functions' costs moved between the culprit's parent and the culprit.

- ``callgrind`` (anywhere valgrind runs): the dataplane runs under callgrind with
  ``--toggle-collect=fwd_burst`` (as the ``sim`` backend does), so every instruction counted is
  forwarding work; the output file is parsed for each function's *self* instruction count
  (cost lines under ``fn=``, minus the inclusive cost lines that follow ``calls=``), divided by
  the packets forwarded. Exact and repeatable, so any non-zero difference is a real one.
- ``memhazard`` (anywhere valgrind runs): the simulated memory hazards per packet at each function
  and source line (store-forward blocks, split loads and stores, 4K aliases; the ``sim``
  backend's hazard pass), so a stall that adds no instruction is still pinned to its line.
- ``perf record`` (bare metal with a PMU): samples of ``instructions`` per symbol, as shares of
  all samples; without a PMU this is reported as unavailable, not approximated.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from perfci_core.metrics import hazard_sites
from perfci_core.result import BenchConfig

from .. import runner
from ..backends.sim import FWD_FUNCTION, SimBackend, block_distances
from ..errors import MeasureError, RunFailed
from ..hazards import DEFAULT_COMMIT_RULE

TOP = 12


@dataclass(frozen=True)
class FunctionDelta:
    function: str
    before: float  # cost per packet (callgrind) or share of samples in % (perf)
    after: float

    @property
    def delta(self) -> float:
        return self.after - self.before

    def to_dict(self) -> dict:
        return {"function": self.function, "before": self.before, "after": self.after, "delta": self.delta}


@dataclass
class Profile:
    tool: str  # "callgrind" | "perf record"
    unit: str
    available: bool
    reason: str = ""
    functions: list[FunctionDelta] = field(default_factory=list)  # largest |delta| first, moved only

    def to_dict(self) -> dict:
        return {"tool": self.tool, "unit": self.unit, "available": self.available, "reason": self.reason,
                "functions": [f.to_dict() for f in self.functions]}


# --- callgrind -----------------------------------------------------------------------------------

_NAMED = re.compile(r"^\((\d+)\)(?:\s+(.*))?$")


def _name(table: dict[str, str], spec: str) -> str:
    """Resolve callgrind's name compression: ``(12) fwd_burst`` defines id 12, ``(12)`` uses it."""
    m = _NAMED.match(spec.strip())
    if not m:
        return spec.strip()
    key, name = m.group(1), m.group(2)
    if name:
        table[key] = name
    return table.get(key, f"({key})")


def callgrind_self_costs(text: str) -> dict[str, int]:
    """Self instructions (``Ir``) per function of a callgrind output file.

    Functions without a symbol (``0x...``) are labelled with their object file.
    """
    fns: dict[str, str] = {}
    obs: dict[str, str] = {}
    costs: dict[str, int] = defaultdict(int)
    positions, ir_column = 1, None
    current, current_ob = None, ""
    skip_next = False
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head = line[0]
        if head.isdigit() or head in "+-*":
            if skip_next:  # the inclusive cost of a call: it belongs to the callee
                skip_next = False
                continue
            parts = line.split()
            if current is not None and ir_column is not None and len(parts) > positions + ir_column:
                costs[current] += int(parts[positions + ir_column])
            continue
        key, _, value = line.partition("=")
        if key == "ob":
            current_ob = _name(obs, value)
        elif key == "cob":
            _name(obs, value)
        elif key == "fn":
            name = _name(fns, value)
            current = f"{name} ({Path(current_ob).name})" if name.startswith("0x") else name
        elif key == "cfn":
            _name(fns, value)
        elif key == "calls":
            skip_next = True
        elif line.startswith("positions:"):
            positions = len(line.split()) - 1
        elif line.startswith("events:"):
            events = line.split()[1:]
            if "Ir" not in events:
                raise ValueError("callgrind output has no Ir event")
            ir_column = events.index("Ir")
    if ir_column is None:
        raise ValueError("no events line in callgrind output")
    return dict(costs)


def diff(before: dict[str, float], after: dict[str, float], top: int = TOP) -> list[FunctionDelta]:
    """Functions whose cost changed, largest absolute change first."""
    rows = [FunctionDelta(f, before.get(f, 0.0), after.get(f, 0.0)) for f in before.keys() | after.keys()]
    moved = [r for r in rows if r.delta != 0.0]
    return sorted(moved, key=lambda r: (-abs(r.delta), r.function))[:top]


def callgrind_per_packet(binary: Path, config: BenchConfig, core: int, workdir: Path, timeout: float = 600.0) -> dict[str, float]:
    """Self instructions per packet of every function run by the forwarding function."""
    valgrind = shutil.which("valgrind")
    if not valgrind:
        raise RunFailed("valgrind is not installed")
    cfg = SimBackend(cache_sim=False).config_for(config)
    with tempfile.TemporaryDirectory(prefix="perfci-profile-") as tmp:
        out = Path(tmp) / "callgrind.out"
        spec = runner.RunSpec(binary, core, cfg, workdir=workdir, timeout=timeout, pin_outer=True,
                              wrapper=[valgrind, "-q", "--tool=callgrind", f"--toggle-collect={FWD_FUNCTION}",
                                       f"--callgrind-out-file={out}"])
        res = runner.run(spec)
        try:
            costs = callgrind_self_costs(out.read_text())
        except (OSError, ValueError) as exc:
            raise RunFailed(f"callgrind output unusable: {exc}") from None
    packets = float(res.report["total"]["fwd_packets"])
    if packets <= 0:
        raise RunFailed("the profiling run forwarded no packets")
    return {name: count / packets for name, count in costs.items()}


PerPacket = Callable[[Path, BenchConfig, int, Path], dict[str, float]]


def compare_builds(tool: str, unit: str, what: str, per_packet: PerPacket, parent: Path, culprit: Path,
                   config: BenchConfig, core: int, workdirs: tuple[Path, Path]) -> Profile:
    """One profiler run on the parent and on the culprit, and what moved; unavailable (with the
    reason) when either run fails."""
    try:
        before = per_packet(parent, config, core, workdirs[0])
        after = per_packet(culprit, config, core, workdirs[1])
    except MeasureError as exc:
        return Profile(tool, unit, False, str(exc))
    return Profile(tool, unit, True, what, diff(before, after))


def callgrind_profile(parent: Path, culprit: Path, config: BenchConfig, core: int, workdirs: tuple[Path, Path]) -> Profile:
    return compare_builds("callgrind", "instructions/packet", f"self instructions per packet under {FWD_FUNCTION}",
                          callgrind_per_packet, parent, culprit, config, core, workdirs)


# --- memhazard ------------------------------------------------------------------------------------

HAZARD_WORDS = {"sf_blocks": "store-forward blocks", "split_loads": "split loads", "split_stores": "split stores",
                "alias_4k": "4K aliases", "line_transfers": "line transfers between lcores",
                "read_transfers": "read transfers between lcores", "nt_reloads": "non-temporal reloads"}


SiteKey = tuple[str, str, str, str]  # (hazard kind, function, file, the line's source text or its number)


def source_text(tree: Path, where: str) -> str | None:
    """The text of ``where`` (``fwd.c:104``) in the source tree ``tree``, whitespace collapsed;
    None when the file is not there (a system header, an object without line information)."""
    name, _, line = where.rpartition(":")
    if not name or not line.isdigit():
        return None
    for path in sorted(tree.rglob(name)):
        lines = path.read_text(errors="replace").splitlines()
        if 1 <= int(line) <= len(lines):
            return " ".join(lines[int(line) - 1].split())
    return None


def sites_by_source(sites: dict[tuple[str, str], float], tree: Path) -> dict[SiteKey, tuple[float, str]]:
    """Per-packet counts by (kind, ``function@file:line``) keyed instead by function, file and the
    line's source text in ``tree``, so a line that only moved (an edit above it) is the same site
    in two builds; the value is (events per packet, ``file:line``). Two lines of one function with
    the same text become one site."""
    out: dict[SiteKey, tuple[float, str]] = {}
    for (kind, site), value in sites.items():
        key, where = site_key(kind, site, tree)
        count, _ = out.get(key, (0.0, where))
        out[key] = (count + value, where)
    return out


def site_key(kind: str, site: str, tree: Path) -> tuple[SiteKey, str]:
    """(the :data:`SiteKey` of ``function@file:line`` in ``tree``, ``file:line``)."""
    function, _, where = site.rpartition("@")
    return (kind, function, where.rpartition(":")[0] or where, source_text(tree, where) or where), where


def distances_by_source(distances: dict[str, str], tree: Path) -> dict[SiteKey, str]:
    """The blocked loads' distances to their stores (``min/median/max`` by ``function@file:line``,
    :func:`~perfci_agent.backends.sim.block_distances`) keyed as :func:`sites_by_source` keys them."""
    return {site_key("sf_blocks", site, tree)[0]: d for site, d in distances.items()}


def site_moves(before: dict[SiteKey, tuple[float, str]], after: dict[SiteKey, tuple[float, str]],
               distances: dict[SiteKey, str] | None = None) -> list[FunctionDelta]:
    """The sites whose count per packet moved, largest move first, each named after its lines in
    both builds (``fwd_burst@fwd.c:210 -> 212``) and its source text, and a blocked load's site after
    its distance to its store (``distances``: min/median/max instructions)."""
    def name(key: SiteKey) -> str:
        kind, function, _, text = key
        lines = [side[key][1] for side in (before, after) if key in side]
        where = lines[0] if len(set(lines)) == 1 else f"{lines[0]} -> {lines[1].rpartition(':')[2]}"
        shown = f" `{text[:60]}`" if text not in lines else ""
        distance = f" [{distances[key]} instructions after the store]" if distances and key in distances else ""
        return f"{HAZARD_WORDS.get(kind, kind)}: {function}@{where}{shown}{distance}"

    return diff({name(k): v for k, (v, _) in before.items()}, {name(k): v for k, (v, _) in after.items()})


def hazards_by_source(binary: Path, config: BenchConfig, core: int, workdir: Path,
                      family: str | None = None) -> tuple[dict[SiteKey, tuple[float, str]], dict[SiteKey, str]]:
    """One memhazard run (store-buffer model ``family``, default this CPU's, and the default
    store-commit rule): :func:`sites_by_source` of its sites and :func:`distances_by_source` of its
    blocked loads, with the sources of ``workdir``."""
    backend = SimBackend(cache_sim=False, family=family)
    sample = backend.sample(binary, core, backend.config_for(config), workdir, rep=0)
    return sites_by_source(hazard_sites(sample.raw), workdir), distances_by_source(block_distances(sample.raw), workdir)


def hazard_profile(parent: Path, culprit: Path, config: BenchConfig, core: int, workdirs: tuple[Path, Path],
                   family: str | None = None) -> Profile:
    """The hazard sites whose count per packet moved between the parent and the culprit."""
    tool, unit = "memhazard", "events/packet"
    try:
        (before, before_dist), (after, after_dist) = (hazards_by_source(parent, config, core, workdirs[0], family),
                                                      hazards_by_source(culprit, config, core, workdirs[1], family))
    except MeasureError as exc:
        return Profile(tool, unit, False, str(exc))
    what = (f"simulated memory hazards per packet under {FWD_FUNCTION}, by source line ({family or 'this CPU'}'s model, "
            f"store-commit rule {DEFAULT_COMMIT_RULE})")
    return Profile(tool, unit, True, what, site_moves(before, after, {**before_dist, **after_dist}))  # the culprit's first


# --- perf record ---------------------------------------------------------------------------------

_PERF_LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)%\s+\[(.)\]\s+(.+?)\s{2,}(\S+)")


def parse_perf_report(text: str, user_only: bool = True) -> dict[str, float]:
    """Sample share (%) per symbol from ``perf report --stdio --sort symbol,dso``."""
    shares: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        m = _PERF_LINE.match(line)
        if not m or (user_only and m.group(2) != "."):
            continue
        shares[m.group(3).strip()] += float(m.group(1))
    return dict(shares)


def perf_shares(binary: Path, config: BenchConfig, core: int, workdir: Path, event: str) -> dict[str, float]:
    perf = shutil.which("perf")
    if not perf:
        raise RunFailed("perf is not installed")
    with tempfile.TemporaryDirectory(prefix="perfci-perf-") as tmp:
        data = Path(tmp) / "perf.data"
        spec = runner.RunSpec(binary, core, config, workdir=workdir, wrapper=[perf, "record", "-q", "-e", event, "-o", str(data), "--"])
        runner.run(spec)
        report = subprocess.run([perf, "report", "-i", str(data), "--stdio", "--sort", "symbol,dso", "--percent-limit", "0.1"],
                                capture_output=True, text=True, errors="replace", timeout=300)
        if report.returncode != 0:
            raise RunFailed(f"perf report failed: {report.stderr.strip()[:500]}")
    return parse_perf_report(report.stdout)


def perf_profile(parent: Path, culprit: Path, config: BenchConfig, core: int, workdirs: tuple[Path, Path],
                 pmu: bool, why_not: str = "", event: str = "instructions") -> Profile:
    """``perf record`` per symbol: only with a PMU (``pmu`` False gives an unavailable profile)."""
    if not pmu:
        return Profile("perf record", "% of samples", False, why_not or "no PMU on this machine")
    try:
        before = perf_shares(parent, config, core, workdirs[0], event)
        after = perf_shares(culprit, config, core, workdirs[1], event)
    except RunFailed as exc:
        return Profile("perf record", "% of samples", False, str(exc))
    return Profile("perf record", "% of samples", True, f"{event} samples per symbol", diff(before, after))
