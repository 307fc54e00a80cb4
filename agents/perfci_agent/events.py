"""Which perf events measure the lean-model counters on this CPU, and which of them exist here.

The agent asks for generic names (the ``pmu.*`` raw keys of :mod:`perfci_core.metrics`):

    cycles, instructions, ref_cycles, cache_references, cache_misses, l1d_load_misses,
    llc_load_misses, branch_misses, sf_blocks, split_loads, split_stores, alias_4k

The first eight map to perf's generic hardware events. The memory hazards the ``sim`` backend
simulates are vendor specific (docs/design.md, "Measurement"; the event lists of perf's pmu-events, from Intel's
perfmon tables and AMD's PPRs):

- loads blocked by store forwarding: Intel, Skylake and later ``ld_blocks.store_forward``;
  AMD Zen 3/4/5 (family 19h/1Ah) ``ls_bad_status2.stli_other``;
- loads and stores split across a cache line: Intel, Skylake and later
  ``mem_inst_retired.split_loads`` / ``.split_stores`` (retired); AMD Zen 4/5 loads only,
  ``ls_misal_loads.ma64`` (64-byte misaligned, i.e. line-crossing, loads); AMD publishes no event
  for split stores, and Zen 3's ``ls_misal_accesses`` counts every misaligned load, not the
  line-crossing ones;
- 4K aliasing: Intel, Skylake and later ``ld_blocks_partial.address_alias`` (loads delayed by a
  false match with an older store on address bits 11:0); AMD has no such event;
- Arm Neoverse and anything else: no equivalent -> recorded as unsupported, never guessed.

Whether a named event exists on the CPU at hand (e.g. ``ld_blocks_partial.address_alias`` on a
newer Intel core) is what the probe below finds out; an event it does not find is unsupported.

Which events really count is *probed* once per machine (``perf stat -x, -e <all> -- true``; an
event the kernel knows but the PMU lacks prints ``<not supported>``, an unknown name is a parse
error) and cached on disk keyed by the machine fingerprint and perf version.

Hybrid Intel parts (Alder/Raptor Lake and later) have one core PMU per core type, and perf prints
every generic event once per PMU (``cpu_core/cycles/``, ``cpu_atom/cycles/``). The counts that
matter are those of the PMU the pinned measurement core belongs to, which sysfs lists
(``/sys/devices/cpu_core/cpus``, ``/sys/devices/cpu_atom/cpus``); :func:`core_pmu` finds it and the
probe records it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from . import perfstat
from .cpuinfo import CpuId

GENERIC: dict[str, str] = {
    "cycles": "cycles",
    "instructions": "instructions",
    "ref_cycles": "ref-cycles",
    "cache_references": "cache-references",
    "cache_misses": "cache-misses",
    "l1d_load_misses": "L1-dcache-load-misses",
    "llc_load_misses": "LLC-load-misses",
    "branch_misses": "branch-misses",
}
HAZARDS: tuple[str, ...] = ("sf_blocks", "split_loads", "split_stores", "alias_4k")
KEYS: tuple[str, ...] = (*GENERIC, *HAZARDS)
_INTEL_HAZARDS = {"sf_blocks": "ld_blocks.store_forward", "split_loads": "mem_inst_retired.split_loads",
                  "split_stores": "mem_inst_retired.split_stores", "alias_4k": "ld_blocks_partial.address_alias"}

# Intel family-6 models from Skylake on (client and server) that have LD_BLOCKS.STORE_FORWARD
# (and the hazard events above) with the Skylake meaning. Older cores have the event too, but with
# different semantics.
_INTEL_SKYLAKE_AND_LATER = {
    0x4E, 0x5E, 0x55, 0x8E, 0x9E, 0x66, 0x6A, 0x6C, 0x7D, 0x7E, 0x8C, 0x8D, 0xA5, 0xA6,
    0xA7, 0x8F, 0x97, 0x9A, 0xB7, 0xBA, 0xBF, 0xCF, 0xAA, 0xAC, 0xAD, 0xAE, 0xC5, 0xC6, 0xBD,
}


@dataclass(frozen=True)
class Mapping:
    """Generic key -> perf event name (None: the CPU has no such event), with reasons."""

    events: dict[str, str | None]
    notes: dict[str, str] = field(default_factory=dict)
    general_counters: int = 4  # programmable counters per logical CPU
    fixed: frozenset[str] = frozenset()  # keys counted on fixed counters (do not use a slot)


def zen_generation(cpu: CpuId) -> int | None:
    if cpu.vendor != "AuthenticAMD" or cpu.family is None:
        return None
    if cpu.family == 0x17:
        return 1 if (cpu.model or 0) < 0x30 else 2
    if cpu.family == 0x19:
        return 3 if (cpu.model or 0) < 0x10 or 0x20 <= (cpu.model or 0) < 0x60 else 4
    if cpu.family == 0x1A:
        return 5
    return None


def mapping_for(cpu: CpuId, smt: bool = False) -> Mapping:
    """The event list for a CPU vendor/family/model."""
    events: dict[str, str | None] = dict(GENERIC)
    notes: dict[str, str] = {}
    if cpu.vendor == "GenuineIntel":
        skylake_on = cpu.family == 6 and cpu.model in _INTEL_SKYLAKE_AND_LATER
        for key, event in _INTEL_HAZARDS.items():
            events[key] = event if skylake_on else None
            if not skylake_on:
                notes[key] = f"Intel family {cpu.family} model {cpu.model:#x} predates Skylake" if cpu.model else "unknown Intel model"
        # Intel: cycles, instructions, ref-cycles on fixed counters; 4 programmable with SMT, 8 without.
        return Mapping(events, notes, 4 if smt else 8, frozenset({"cycles", "instructions", "ref_cycles"}))
    if cpu.vendor == "AuthenticAMD":
        gen = zen_generation(cpu)
        if gen is not None and gen >= 3:
            events["sf_blocks"] = "ls_bad_status2.stli_other"
        else:
            events["sf_blocks"] = None
            notes["sf_blocks"] = f"AMD family {cpu.family:#x} (Zen {gen or '?'}) has no store-to-load-interlock event" if cpu.family else "unknown AMD family"
        if gen is not None and gen >= 4:
            events["split_loads"] = "ls_misal_loads.ma64"
        else:
            events["split_loads"] = None
            notes["split_loads"] = f"AMD Zen {gen or '?'} has no event for line-crossing loads (ls_misal_loads.ma64 is Zen 4 on)"
        events["split_stores"] = None
        notes["split_stores"] = "AMD has no event for stores that cross a cache line"
        events["alias_4k"] = None
        notes["alias_4k"] = "AMD has no 4K-aliasing event"
        events["ref_cycles"] = None
        notes["ref_cycles"] = "AMD has no ref-cycles event"
        return Mapping(events, notes, 6)
    for key in HAZARDS:
        events[key] = None
        notes[key] = f"no {key} event known for vendor {cpu.vendor}"
    if cpu.vendor == "ARM":
        notes["sf_blocks"] = "Arm Neoverse has no loads-blocked-by-store-forwarding event"
    else:
        notes["sf_blocks"] = f"no store-forward event known for vendor {cpu.vendor}"
    events["ref_cycles"] = None
    notes["ref_cycles"] = f"no ref-cycles on {cpu.vendor}"
    return Mapping(events, notes, 6)


def groups(keys: list[str], mapping: Mapping) -> list[list[str]]:
    """Split ``keys`` into perf groups that each fit the PMU (cycles+instructions lead the first).

    Events in one group are scheduled together, so their ratios are exact; if more than one group
    is needed, perf multiplexes the groups and reports running % < 100 (kept and flagged).
    """
    order = [k for k in KEYS if k in keys]
    out: list[list[str]] = []
    current: list[str] = []
    used = 0
    for k in order:
        cost = 0 if k in mapping.fixed else 1
        if current and used + cost > mapping.general_counters:
            out.append(current)
            current, used = [], 0
        current.append(k)
        used += cost
    if current:
        out.append(current)
    return out


def event_spec(keys_groups: list[list[str]], mapping: Mapping) -> str:
    """The ``-e`` argument: ``{a,b},{c,d}`` (a single event is not braced)."""
    parts = []
    for g in keys_groups:
        names = [mapping.events[k] for k in g if mapping.events.get(k)]
        if not names:
            continue
        parts.append(names[0] if len(names) == 1 else "{" + ",".join(names) + "}")
    return ",".join(parts)


@dataclass(frozen=True)
class Probe:
    """Which generic keys this machine can count, and why the others cannot."""

    perf: str | None  # perf version string, None when perf is missing
    supported: dict[str, str]  # key -> event name
    unsupported: dict[str, str]  # key -> reason
    paranoid: int | None
    error: str | None = None  # perf unusable altogether
    pmu: str | None = None  # hybrid parts: the core PMU counted (that of the measurement core)

    @property
    def has_pmu(self) -> bool:
        return "instructions" in self.supported and "cycles" in self.supported

    def to_json(self) -> dict:
        return {"perf": self.perf, "supported": self.supported, "unsupported": self.unsupported,
                "paranoid": self.paranoid, "error": self.error, "pmu": self.pmu}

    @classmethod
    def from_json(cls, d: dict) -> Probe:
        return cls(d.get("perf"), dict(d.get("supported", {})), dict(d.get("unsupported", {})), d.get("paranoid"), d.get("error"),
                   d.get("pmu"))

    def describe_pmu(self) -> str:
        """Which core PMU is counted, for the backend's reason (empty on non-hybrid parts)."""
        return f"; hybrid CPU: counting the {self.pmu} PMU of the measurement core" if self.pmu else ""

    def why_no_pmu(self) -> str:
        if self.error:
            return self.error
        for key in ("instructions", "cycles"):
            if key in self.unsupported:
                return f"no PMU: perf reports {GENERIC[key]} {self.unsupported[key]}"
        return ""


def parse_cpulist(text: str) -> set[int]:
    """A kernel CPU list (``0-15,20,22-23``) as a set of CPU numbers."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def core_pmu(core: int | None, sysfs: Path = Path("/sys")) -> str | None:
    """On a hybrid CPU, the core PMU (``cpu_core``, ``cpu_atom``) whose ``cpus`` list holds
    ``core``; None on a CPU with one core PMU (its events carry no PMU prefix). Without a core,
    the big cores' PMU: that is where measurement cores are pinned."""
    pmus: dict[str, set[int]] = {}
    for cpus in sorted((sysfs / "devices").glob("cpu_*/cpus")):
        try:
            pmus[cpus.parent.name] = parse_cpulist(cpus.read_text())
        except (OSError, ValueError):
            continue
    if not pmus:
        return None
    if core is None:
        return "cpu_core" if "cpu_core" in pmus else min(pmus)
    for name, members in sorted(pmus.items()):
        if core in members:
            return name
    return None


def read_paranoid() -> int | None:
    try:
        return int(Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip())
    except (OSError, ValueError):
        return None


def paranoid_problem(paranoid: int | None, euid: int | None = None, cpu_wide: bool = True) -> str | None:
    """Why perf cannot count the forwarding core here, naming the setting, or None."""
    euid = os.geteuid() if euid is None else euid
    if euid == 0 or paranoid is None:
        return None
    limit = 0 if cpu_wide else 2
    if paranoid > limit:
        return (
            f"kernel.perf_event_paranoid is {paranoid}: counting a CPU (perf stat -C) as a non-root user "
            f"needs it <= {limit} (sysctl -w kernel.perf_event_paranoid={limit}) or CAP_PERFMON on perf"
        )
    return None


def perf_version(perf: str) -> str | None:
    try:
        r = subprocess.run([perf, "--version"], capture_output=True, text=True, errors="replace", timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() or None


def probe(mapping: Mapping, perf: str | None = None, runner=subprocess.run, core: int | None = None,
          sysfs: Path = Path("/sys")) -> Probe:
    """Ask perf which of the mapped events count on this machine (one `perf stat ... true`); on a
    hybrid CPU, on the core PMU of ``core`` (the measurement core)."""
    perf = perf or shutil.which("perf")
    pmu = core_pmu(core, sysfs)
    paranoid = read_paranoid()
    unsupported = {k: f"none on this CPU ({mapping.notes.get(k, 'no mapping')})" for k, e in mapping.events.items() if e is None}
    if perf is None:
        return Probe(None, {}, unsupported, paranoid, "perf is not installed (Debian: linux-perf)", pmu)
    version = perf_version(perf)
    problem = paranoid_problem(paranoid)
    if problem:
        return Probe(version, {}, unsupported, paranoid, problem, pmu)
    wanted = {k: e for k, e in mapping.events.items() if e}
    supported: dict[str, str] = {}
    pending = dict(wanted)

    def stat(events: str) -> subprocess.CompletedProcess[str]:
        # perf's messages need not be UTF-8 (an unknown event echoed back, a localised error): replaced, not fatal
        return runner([perf, "stat", "-x,", "-e", events, "--", "true"], capture_output=True, text=True, errors="replace", timeout=60)

    r = stat(",".join(pending.values()))
    if r.returncode != 0:
        # One unknown name fails the whole command: probe one by one.
        results = {}
        for k, e in pending.items():
            one = stat(e)
            if one.returncode != 0:
                unsupported[k] = f"{e}: unknown to this perf/kernel"
                continue
            results[k] = perfstat.parse_csv(one.stderr)
        counts_by_key = {k: perfstat.lookup(cs, wanted[k], pmu) for k, cs in results.items()}
    else:
        counts = perfstat.parse_csv(r.stderr)
        counts_by_key = {k: perfstat.lookup(counts, e, pmu) for k, e in pending.items()}
    for k, c in counts_by_key.items():
        if c is None:
            unsupported[k] = f"{wanted[k]}: not reported by perf"
        elif c.status == "not supported":
            unsupported[k] = "<not supported>"
        else:
            supported[k] = wanted[k]
    return Probe(version, supported, unsupported, paranoid, pmu=pmu)


def cached_probe(mapping: Mapping, cache_dir: Path, machine_id: str, refresh: bool = False, core: int | None = None) -> Probe:
    """:func:`probe`, cached per machine fingerprint, perf version and measurement core under ``cache_dir``."""
    perf = shutil.which("perf")
    version = perf_version(perf) if perf else None
    path = Path(cache_dir) / f"probe-{machine_id[:16]}.json"
    if not refresh and path.exists():
        try:
            data = json.loads(path.read_text())
            cached = Probe.from_json(data)
            if (data.get("perf") == version and data.get("paranoid") == read_paranoid() and data.get("euid") == os.geteuid()
                    and data.get("core") == core and set(mapping.events) <= {*cached.supported, *cached.unsupported}):
                return cached  # (a probe from before an event was added to the mapping is made again)
        except (OSError, ValueError):
            pass
    result = probe(mapping, perf, core=core)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**result.to_json(), "euid": os.geteuid(), "core": core}, indent=1, sort_keys=True))
    except OSError:
        pass
    return result
