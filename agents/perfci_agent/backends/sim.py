"""``sim``: valgrind. Exact instructions of the forwarding function, memory hazards, simulated
cache misses.

- memhazard (:mod:`perfci_agent.hazards`) collects in callgrind's ``--toggle-collect=fwd_burst``
  window (``fwd_burst`` and what it calls): its instruction count equals callgrind's ``totals:``
  (checked on this dataplane), and divided by the report's ``total.fwd_packets`` (every fwd_burst
  call, warm-up included) it is IPP. In the same pass it replays the window's loads and stores
  through a store-buffer model: store-forward blocks, split loads and stores, 4K aliases per
  packet, loads of lines a non-temporal store wrote (``nt_reloads_pp``: never forwarded, a memory round
  trip), and the functions and lines where they happen (with, per blocked-load site, the distance
  in instructions back to the store: ``sim.sf_dist_<min|median|max>.<site>``). When a store has left
  the buffer follows the backend's ``commit_rule`` (``time``, the default, or ``rob``: memhazard's
  "Store commit"), recorded as ``sim.hz_commit_rule.<rule>``. It also counts the window's
  instructions by function (each symbol's self instructions, what is inlined into it included, as
  callgrind counts them): the :data:`FUNCTIONS` largest as ``sim.fn.<function>``, the rest as one
  ``sim.fn_other``, so an IPP move is explained by where the instructions came and went.
  Bit-identical run to run (EAL init, which varies, is not collected). One memhazard pass costs
  less than one callgrind pass did.
- cachegrind ``--cache-sim=yes`` with an explicit geometry (``--I1 --D1 --LL``; its
  auto-detection is wrong in VMs) simulates the caches; the agent sums the D1 and LL *read*
  misses (``D1mr``, ``DLmr``) of the lines attributed to ``fwd_burst`` (its own code and what is
  inlined into it) and divides by the packets of that run.

Geometry: the machine's real caches from /sys/devices/system/cpu/cpu0/cache/index*/ (L1d, L1i
and the highest unified level); if sysfs has none, or a level cachegrind cannot simulate (sets
not a power of two), :data:`DEFAULT_GEOMETRY` — I1 32 KiB 8-way, D1 32 KiB 8-way, LL 8 MiB 16-way,
64-byte lines (a typical x86 server core) — and the result's raw keys record the geometry used.

The memhazard and cachegrind passes run side by side on two cores when the process has two.

Several lcores: when the config asks for more than one (``lcores``, or the backend's own
``lcores``), the memhazard pass runs the dataplane on that many lcores (EAL ``-l``, one RX/TX
queue pair each) and also counts the cache-line transfers between them per packet
(``line_transfers_pp``, ``read_transfers_pp``; exactly 0 on one lcore). valgrind runs one thread
at a time whatever the CPU count, so the lcores need only exist (CPUs this process may use). The
cachegrind pass stays on one lcore: cachegrind simulates one cache for every thread, not one per
core, so its misses would be those of no real machine.

One count per commit, wherever it is built: the simulated hazards and cache misses depend on
addresses, down to the byte, and they moved with the length of the binary's path and of the
working directory (each alone changed the 4K aliases, with argv and environment padded), and
with the length of memhazard's folder under the cache directory (``VALGRIND_LIB``: valgrind puts
its preload library, named after it, in the client's ``LD_PRELOAD``, and the dynamic loader's
allocations, TLS among them, move with that name: one net_ring load's 4K alias came and went).
Every valgrind run therefore starts from a stage of fixed-length paths (:func:`fixed_stage`): a
copy of the binary, a working directory linking the worktree's ``dataplane/`` entries and a link
to memhazard's folder, in a fresh ``/tmp/perfci-stage-XXXXXXXX``, with a fixed environment padded
to a fixed size.

Packet counts are small under valgrind (:meth:`~perfci_core.result.BenchConfig.as_run_by`); the result's
config records what actually ran.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from perfci_core import metrics
from perfci_core.metrics import FUNCTION_PREFIX, OTHER_FUNCTIONS_KEY, SITE_PREFIX
from perfci_core.result import BenchConfig, Sample

from .. import runner
from ..cpuinfo import read_cpuid, read_sys
from ..errors import RunFailed
from ..hazards import COMMIT_RULES, DEFAULT_COMMIT_RULE, FamilyChoice, HazardReport, family_for, memhazard_lib, parse_report
from ..hazards.family import RECORDED_PREFIX, RECORDED_RULE_PREFIX
from ..hazards.tool import TOOL_NAME
from . import metric_values

FWD_FUNCTION = "fwd_burst"
SYS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
# Where the stages go: a fixed directory (not TMPDIR, which differs from agent to agent).
STAGE_ROOT = Path("/tmp")
STAGE_BINARY = "perfci-fwd"
STAGE_LIB = "vglib"  # the link to memhazard's VALGRIND_LIB folder
# The whole environment of a valgrind run (plus VALGRIND_LIB and the stack padding): nothing of the agent's.
FIXED_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"}


@contextmanager
def fixed_stage(binary: Path, workdir: Path | None, valgrind_lib: Path) -> Iterator[tuple[Path, Path, Path]]:
    """(binary, working directory, ``VALGRIND_LIB``) at paths of the same length on every agent and
    for every cache directory: a copy of the binary, a directory of links to the entries of ``workdir``
    (the routes files the configs name relative to it) and a link to ``valgrind_lib``, in a fresh
    directory of fixed-length name."""
    stage = Path(tempfile.mkdtemp(prefix="perfci-stage-", dir=STAGE_ROOT))
    try:
        staged = stage / STAGE_BINARY
        shutil.copy2(binary, staged)
        cwd = stage / "wd"
        cwd.mkdir()
        for entry in sorted(workdir.iterdir()) if workdir else ():
            (cwd / entry.name).symlink_to(entry.resolve())
        lib = stage / STAGE_LIB
        lib.symlink_to(valgrind_lib.resolve())
        yield staged, cwd, lib
    finally:
        shutil.rmtree(stage, ignore_errors=True)


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


HAZARD_SITES = 5  # per hazard kind, the sites named in the raw keys (most events first)
RAW_HAZARDS = {"sf_blocked": "sim.sf_blocks", "split_loads": "sim.split_loads", "split_stores": "sim.split_stores",
               "alias_4k": "sim.alias_4k", "sf_forwarded": "sim.sf_forwarded", "line_transfers": "sim.line_transfers",
               "read_transfers": "sim.read_transfers", "nt_reloads": "sim.nt_reloads"}
SITE_KINDS = ("sf_blocked", "split_loads", "split_stores", "alias_4k", "line_transfers", "read_transfers", "nt_reloads")
# Raw keys ``sim.sf_dist_<min|median|max>.<site>``: instructions from a blocked load back to its store, per named
# sf_blocks site (not under ``sim.site.``, which holds counts only).
DISTANCE_PREFIX = "sim.sf_dist_"


def hazard_raw(report: HazardReport, family: FamilyChoice) -> dict[str, float]:
    """Raw counts of one memhazard run: totals, the model used, and the top sites per hazard kind
    (``sim.site.<kind>.<function>@<file:line>``, for the explanation and bisect's table)."""
    raw: dict[str, float] = {RAW_HAZARDS[k]: float(v) for k, v in report.counts.items()}
    if report.nontemporal:  # non-temporal stores, the loads of what they wrote, the lines past the table
        raw.update({RAW_HAZARDS.get(k, f"sim.{k}"): float(v) for k, v in report.nontemporal.items()})
    raw.update({"sim.loads": float(report.loads), "sim.stores": float(report.stores),
                "sim.hz_store_buffer": float(report.store_buffer), "sim.hz_rob": float(report.rob),
                f"{RECORDED_PREFIX}{report.family}": 1.0, f"{RECORDED_RULE_PREFIX}{report.commit_rule}": 1.0})
    if family.default:
        raw["sim.hz_family_default"] = 1.0  # the CPU is not a modelled family (see backend_reason)
    raw.update({f"sim.hz_{k}": float(v) for k, v in report.sharing.items()})
    raw.update({f"sim.hz_fence_{k}": float(v) for k, v in report.fences.items()})
    for kind in SITE_KINDS:
        for site in report.top_sites(kind, HAZARD_SITES):
            raw[f"{SITE_PREFIX}{RAW_HAZARDS[kind][4:]}.{site.label}"[:128]] = float(site.count)
            if site.distance:
                for part in ("min", "median", "max"):
                    raw[f"{DISTANCE_PREFIX}{part}.{site.label}"[:128]] = float(getattr(site.distance, part))
    return raw


FUNCTIONS = 16  # the functions named in the raw keys (most instructions first); fwd_burst's window runs 2 or 3


def function_raw(report: HazardReport) -> dict[str, float]:
    """Self instructions of the window by function: the :data:`FUNCTIONS` largest
    (``sim.fn.<function>``) and the sum of the others (``sim.fn_other``, only when there are others)."""
    ranked = sorted(report.functions.items(), key=lambda kv: (-kv[1], kv[0]))
    raw: dict[str, float] = {}
    for name, count in ranked[:FUNCTIONS]:
        key = f"{FUNCTION_PREFIX}{name}"[:128]
        raw[key] = raw.get(key, 0.0) + float(count)
    rest = sum(count for _, count in ranked[FUNCTIONS:])
    if rest:
        raw[OTHER_FUNCTIONS_KEY] = float(rest)
    return raw


def block_distances(raw: Mapping[str, float | None]) -> dict[str, str]:
    """``min/median/max`` instructions from the blocked loads back to their stores, by site label, from a
    sample's raw keys (:func:`hazard_raw` writes them)."""
    parts = ("min", "median", "max")
    sites = {k.removeprefix(f"{DISTANCE_PREFIX}min.") for k in raw if k.startswith(f"{DISTANCE_PREFIX}min.")}
    values = {site: [raw.get(f"{DISTANCE_PREFIX}{p}.{site}") for p in parts] for site in sites}
    return {site: "/".join(f"{v:.0f}" for v in vs) for site, vs in values.items() if None not in vs}


class SimBackend:
    name = metrics.Backend.SIM
    default_reps = 2  # deterministic: the second run checks that (identical IPP)

    def __init__(self, timeout: float = 600.0, geometry: Geometry | None = None, cache_sim: bool = True,
                 family: str | None = None, tool_cache: Path | None = None, lcores: int = 1,
                 commit_rule: str | None = None, window_fn: str = FWD_FUNCTION) -> None:
        """``window_fn``: the function whose calls memhazard counts in (``fwd_burst``: the forwarding
        work, whose instructions per packet are IPP; a benchmark may widen it to the whole poll
        loop, ``lcore_main``, to see every line the lcores share, the ``ipp`` it derives is then
        that loop's)."""
        if lcores < 1:
            raise ValueError(f"lcores must be 1 or more, got {lcores}")
        commit_rule = commit_rule or DEFAULT_COMMIT_RULE
        if commit_rule not in COMMIT_RULES:
            raise ValueError(f"unknown store-commit rule {commit_rule!r}; known: {', '.join(COMMIT_RULES)}")
        self.commit_rule = commit_rule
        self.window_fn = window_fn
        self.lcores = lcores
        self.timeout = timeout
        self.geometry = geometry or read_geometry()
        self.cache_sim = cache_sim
        self.valgrind = shutil.which("valgrind") or "valgrind"
        self.family = family_for(read_cpuid(), family)
        self.tool_cache = tool_cache
        self._lib: Path | None = None

    def config_for(self, config: BenchConfig) -> BenchConfig:
        return config.as_run_by(self.name)

    def prepare(self, binary: Path, core: int, config: BenchConfig, workdir: Path) -> None:
        self.tool_lib()

    def tool_lib(self) -> Path:
        """memhazard's VALGRIND_LIB folder; :class:`ToolUnavailable` says what is missing."""
        if self._lib is None:
            self._lib = memhazard_lib(self.tool_cache)
        return self._lib

    def forwarding_cores(self, core: int, config: BenchConfig) -> list[int]:
        """``core`` and as many more CPUs of this process as the config's lcores need."""
        lcores = int(getattr(config, "lcores", 0) or self.lcores)
        others = [c for c in sorted(os.sched_getaffinity(0)) if c != core]
        if lcores - 1 > len(others):
            raise RunFailed(f"{lcores} lcores asked for, but this process may use only {len(others) + 1} CPU(s) "
                            f"({sorted(os.sched_getaffinity(0))}): EAL needs one CPU number per lcore")
        return [core, *others[:lcores - 1]]

    def _spec(self, binary: Path, core: int, config: BenchConfig, workdir: Path, tool_args: list[str],
              valgrind_lib: Path | None = None, cores: list[int] | None = None) -> runner.RunSpec:
        """A valgrind run whose stack starts at the same address every time: a fixed environment,
        padded (simulated hazards and cache misses depend on stack addresses). ``binary`` and
        ``workdir`` come from :func:`fixed_stage`."""
        env = dict(FIXED_ENV)
        if valgrind_lib is not None:
            env["VALGRIND_LIB"] = str(valgrind_lib)
        return runner.RunSpec(binary, core, config, cores=cores or [], workdir=workdir, timeout=self.timeout,
                              wrapper=[self.valgrind, "-q", *tool_args], pin_outer=True, env=env, stable_stack=True)

    def _hazard_spec(self, binary: Path, core: int, config: BenchConfig, workdir: Path, out: Path,
                     valgrind_lib: Path) -> runner.RunSpec:
        """memhazard: instructions and hazards of the window. valgrind must keep every load the
        program makes (``allregs-at-mem-access``: by default it drops loads whose value is dead in
        its IR). ``--fair-sched=yes``: with several lcores, valgrind's ticket lock runs the threads
        in turn, one timeslice each; its default pipe lock lets the kernel pick, often the same
        thread again, and one lcore could run far ahead of the others (the line-transfer counts
        do not depend on that order, the memory the tool holds until the others catch up does).
        ``--lcores``: the tool starts every lcore at time 0, whichever valgrind runs first."""
        cores = self.forwarding_cores(core, config)
        return self._spec(binary, core, config, workdir,
                          [f"--tool={TOOL_NAME}", f"--window-fn={self.window_fn}", f"--family={self.family.name}",
                           f"--commit-rule={self.commit_rule}", f"--lcores={len(cores)}", "--fair-sched=yes",
                           "--vex-iropt-register-updates=allregs-at-mem-access", "--read-inline-info=yes", "--fullpath-after=",
                           f"--out-file={out}"], valgrind_lib, cores)

    def sample(self, binary: Path, core: int, config: BenchConfig, workdir: Path, rep: int) -> Sample:
        """One memhazard run (instructions + hazards) and, side by side on another core when
        this process has one, one cachegrind run (simulated caches)."""
        raw: dict[str, float | None] = {}
        with (tempfile.TemporaryDirectory(prefix="perfci-sim-") as tmp,
              fixed_stage(binary, workdir, self.tool_lib()) as (binary, workdir, valgrind_lib)):
            hz_out, cg_out = Path(tmp) / "memhazard.out", Path(tmp) / "cachegrind.out"
            specs = [self._hazard_spec(binary, core, config, workdir, hz_out, valgrind_lib)]
            if self.cache_sim:
                other = next((c for c in sorted(os.sched_getaffinity(0), reverse=True) if c != core), core)
                specs.append(self._spec(binary, other, config, workdir,
                                        ["--tool=cachegrind", "--cache-sim=yes", *self.geometry.args(), f"--cachegrind-out-file={cg_out}"]))
            with ThreadPoolExecutor(len(specs)) as pool:
                results = list(pool.map(runner.run, specs))  # a RunFailed of either run is raised here
            res = results[0]
            try:
                report = parse_report(hz_out.read_text())
            except (OSError, ValueError) as exc:
                raise RunFailed(f"memhazard output unusable: {exc}") from None
            packets = float(res.report["total"]["fwd_packets"])
            if report.windows == 0 or report.instructions == 0 or packets == 0:
                raise RunFailed(f"memhazard saw {report.windows} call(s) of {self.window_fn} and {report.instructions} instructions "
                                f"for {packets:.0f} packets: the binary needs the symbol {self.window_fn} (an exported, "
                                f"non-inlined function; built with symbols, not stripped)")
            raw["sim.fwd_instructions"] = float(report.instructions)
            raw["sim.fwd_packets"] = packets
            raw["sim.lcores"] = float(len(results[0].report.get("lcores") or [None]))
            raw.update(hazard_raw(report, self.family))
            raw.update(function_raw(report))
            if self.cache_sim:
                try:
                    sums = parse_cachegrind_function(cg_out.read_text())
                except (OSError, ValueError) as exc:
                    raise RunFailed(f"cachegrind output unusable: {exc}") from None
                raw["sim.d1_misses"] = float(sums.get("D1mr", 0))
                raw["sim.ll_misses"] = float(sums.get("DLmr", 0))
                raw["sim.cache_instructions"] = float(sums.get("Ir", 0))
                raw["sim.cache_packets"] = float(results[1].report["total"]["fwd_packets"])
                g = self.geometry
                raw.update({"sim.geom_d1_bytes": float(g.d1.size), "sim.geom_d1_ways": float(g.d1.assoc),
                            "sim.geom_ll_bytes": float(g.ll.size), "sim.geom_ll_ways": float(g.ll.assoc),
                            "sim.geom_line_bytes": float(g.d1.line)})
        return Sample(rep=rep, raw=raw, metrics=metric_values(metrics.derive_sim(raw), metrics.Backend.SIM))
