"""``sim``: valgrind. Exact instructions of the forwarding function, simulated cache misses.

- callgrind ``--toggle-collect=fwd_burst`` collects only while ``fwd_burst`` (and what it calls)
  runs, so the output file's ``totals:`` line is the instructions of the forwarding work; divided
  by the report's ``total.fwd_packets`` (every fwd_burst call, warm-up included) that is IPP.
  The count is bit-identical run to run (EAL init, which varies, is not collected).
- cachegrind ``--cache-sim=yes`` with an explicit geometry (``--I1 --D1 --LL``; its
  auto-detection is wrong in VMs) simulates the caches; the agent sums the D1 and LL *read*
  misses (``D1mr``, ``DLmr``) of the lines attributed to ``fwd_burst`` (its own code and what is
  inlined into it) and divides by the packets of that run.

Geometry: the machine's real caches from /sys/devices/system/cpu/cpu0/cache/index*/ (L1d, L1i
and the highest unified level); if sysfs has none, or a level cachegrind cannot simulate (sets
not a power of two), :data:`DEFAULT_GEOMETRY` — I1 32 KiB 8-way, D1 32 KiB 8-way, LL 8 MiB 16-way,
64-byte lines (a typical x86 server core) — and the result's raw keys record the geometry used.

Packet counts are small under valgrind (:meth:`~perfci_agent.result.BenchConfig.as_run_by`); the result's
config records what actually ran.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import metrics, runner
from ..cpuinfo import read_sys
from ..errors import RunFailed
from ..result import BenchConfig, Sample
from . import metric_values

FWD_FUNCTION = "fwd_burst"
SYS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")


@dataclass(frozen=True)
class Cache:
    size: int
    assoc: int
    line: int

    def arg(self) -> str:
        return f"{self.size},{self.assoc},{self.line}"

    @property
    def valid(self) -> bool:
        if self.size <= 0 or self.assoc <= 0 or self.line <= 0 or self.size % (self.assoc * self.line):
            return False
        sets = self.size // (self.assoc * self.line)
        return sets > 0 and sets & (sets - 1) == 0 and self.line & (self.line - 1) == 0


@dataclass(frozen=True)
class Geometry:
    i1: Cache
    d1: Cache
    ll: Cache
    source: str

    def args(self) -> list[str]:
        return [f"--I1={self.i1.arg()}", f"--D1={self.d1.arg()}", f"--LL={self.ll.arg()}"]


DEFAULT_GEOMETRY = Geometry(Cache(32768, 8, 64), Cache(32768, 8, 64), Cache(8 * 1024 * 1024, 16, 64), "default")


def _size(text: str | None) -> int | None:
    if not text:
        return None
    text = text.strip().upper()
    mult = {"K": 1024, "M": 1024 * 1024, "G": 1024**3}.get(text[-1:], 1)
    try:
        return int(text.rstrip("KMG")) * mult
    except ValueError:
        return None


def read_geometry(root: Path = SYS_CACHE) -> Geometry:
    levels: dict[tuple[int, str], Cache] = {}
    for idx in sorted(root.glob("index*")):
        level, kind = read_sys(idx / "level"), read_sys(idx / "type")
        size, ways, line = _size(read_sys(idx / "size")), read_sys(idx / "ways_of_associativity"), read_sys(idx / "coherency_line_size")
        try:
            cache = Cache(size or 0, int(ways or 0), int(line or 0))
            levels[(int(level or 0), kind or "")] = cache
        except ValueError:
            continue
    d1, i1 = levels.get((1, "Data")), levels.get((1, "Instruction"))
    unified = sorted((lvl, c) for (lvl, kind), c in levels.items() if kind == "Unified")
    ll = unified[-1][1] if unified else None
    if d1 and i1 and ll and d1.valid and i1.valid and ll.valid:
        return Geometry(i1, d1, ll, "sysfs")
    return DEFAULT_GEOMETRY


def parse_callgrind_total(text: str) -> int:
    """The collected instruction count of a callgrind output file (``totals:`` or ``summary:``)."""
    for key in ("totals:", "summary:"):
        for line in text.splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    raise ValueError("no totals/summary line in callgrind output")


def parse_cachegrind_function(text: str, function: str = FWD_FUNCTION) -> dict[str, int]:
    """Sum every event column over the lines attributed to ``function`` in a cachegrind out file."""
    events: list[str] = []
    sums: dict[str, int] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
            sums = {e: 0 for e in events}
        elif line.startswith("fn="):
            current = line[3:].strip()
        elif line.startswith(("fl=", "fi=", "fe=")):
            continue
        elif current == function and line[:1].isdigit():
            parts = line.split()
            for name, value in zip(events, parts[1:]):
                sums[name] += int(value)
    if not events:
        raise ValueError("no events line in cachegrind output")
    return sums


class SimBackend:
    name = metrics.Backend.SIM
    default_reps = 2  # deterministic: the second run checks that (identical IPP)

    def __init__(self, timeout: float = 600.0, geometry: Geometry | None = None, cache_sim: bool = True) -> None:
        self.timeout = timeout
        self.geometry = geometry or read_geometry()
        self.cache_sim = cache_sim
        self.valgrind = shutil.which("valgrind") or "valgrind"

    def config_for(self, config: BenchConfig) -> BenchConfig:
        return config.as_run_by(self.name)

    def prepare(self, binary: Path, core: int, config: BenchConfig, workdir: Path) -> None:
        return None

    def _valgrind(self, binary: Path, core: int, config: BenchConfig, workdir: Path, tool_args: list[str]) -> runner.RunResult:
        spec = runner.RunSpec(binary, core, config, workdir=workdir, timeout=self.timeout,
                              wrapper=[self.valgrind, "-q", *tool_args], pin_outer=True)
        return runner.run(spec)

    def sample(self, binary: Path, core: int, config: BenchConfig, workdir: Path, rep: int) -> Sample:
        raw: dict[str, float | None] = {}
        with tempfile.TemporaryDirectory(prefix="perfci-sim-") as tmp:
            out = Path(tmp) / "callgrind.out"
            res = self._valgrind(binary, core, config, workdir,
                                 ["--tool=callgrind", f"--toggle-collect={FWD_FUNCTION}", f"--callgrind-out-file={out}"])
            try:
                instructions = parse_callgrind_total(out.read_text())
            except (OSError, ValueError) as exc:
                raise RunFailed(f"callgrind output unusable: {exc}") from None
            packets = float(res.report["total"]["fwd_packets"])
            if instructions == 0 or packets == 0:
                raise RunFailed(f"callgrind collected {instructions} instructions in {FWD_FUNCTION} for {packets:.0f} packets "
                                f"(is {FWD_FUNCTION} an exported, non-inlined symbol?)")
            raw["sim.fwd_instructions"] = float(instructions)
            raw["sim.fwd_packets"] = packets
            if self.cache_sim:
                out = Path(tmp) / "cachegrind.out"
                res = self._valgrind(binary, core, config, workdir,
                                     ["--tool=cachegrind", "--cache-sim=yes", *self.geometry.args(), f"--cachegrind-out-file={out}"])
                try:
                    sums = parse_cachegrind_function(out.read_text())
                except (OSError, ValueError) as exc:
                    raise RunFailed(f"cachegrind output unusable: {exc}") from None
                raw["sim.d1_misses"] = float(sums.get("D1mr", 0))
                raw["sim.ll_misses"] = float(sums.get("DLmr", 0))
                raw["sim.cache_instructions"] = float(sums.get("Ir", 0))
                raw["sim.cache_packets"] = float(res.report["total"]["fwd_packets"])
                g = self.geometry
                raw.update({"sim.geom_d1_bytes": float(g.d1.size), "sim.geom_d1_ways": float(g.d1.assoc),
                            "sim.geom_ll_bytes": float(g.ll.size), "sim.geom_ll_ways": float(g.ll.assoc),
                            "sim.geom_line_bytes": float(g.d1.line)})
        return Sample(rep=rep, raw=raw, metrics=metric_values(metrics.derive_sim(raw), metrics.Backend.SIM))
