"""The metric catalogue and the one implementation of every derived-metric formula.

The lean measurement model (docs/design.md, "The lean model"):

    IPC  = instructions / cycles
    eIPC = useful instructions / useful cycles        (idle polling of empty RX queues removed)
    IPP  = useful instructions / packets
    CPP  = useful cycles / packets = IPP / eIPC
    CUR  = useful cycles / all cycles of the forwarding core
    PPS  = packets / window seconds = Freq x CUR x eIPC / IPP = Freq x CUR / CPP

"Useful" removes the idle share with an idle calibration (the same loop, no offered traffic):

    i_e = instructions / empty polls   and   c_e = cycles / empty polls      (idle run)
    useful instructions = instructions - empty_polls x i_e                     (loaded run)
    useful cycles       = cycles       - empty_polls x c_e

Raw counts are keyed by source: ``tsc.*`` (the dataplane's own rdtsc accounting), ``pmu.*``
(perf stat hardware events, generic names below) and ``sim.*`` (valgrind). A raw value of
``None`` means absent (<not supported>/<not counted>), never zero; metrics that need it are
simply not derived.

This module is pure (stdlib only): the agent derives with it and the server validates uploads
and reads better-directions from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Mapping


class Backend(str, Enum):
    PMU = "pmu"
    SIM = "sim"
    TSC = "tsc"


# The order an ``auto`` job takes the backends a host can run in: the PMU's counters, else simulated
# counts, else the dataplane's rdtsc accounting (the agent offers and picks in this order; the server
# reads it to know what an ``auto`` job will run on a machine).
AUTO_PREFERENCE: tuple[str, ...] = (Backend.PMU.value, Backend.SIM.value, Backend.TSC.value)


class Direction(str, Enum):
    LOWER_IS_BETTER = "lower"
    HIGHER_IS_BETTER = "higher"


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    direction: Direction
    description: str
    backends: frozenset[Backend]
    # Deterministic (sim) values that move by less than this, in the metric's unit, have not
    # changed: a count that appears once in tens of thousands of packets (a drop, a ring wrap
    # landing differently) is not a regression of the forwarding path.
    exact_floor: float = 0.0
    # False: measured, stored, plotted and named in explanations, but never alerted on by itself.
    alerts: bool = True
    # Physical bounds. Every metric is a ratio of counts, so a negative or non-finite value is
    # never a measurement; ``positive`` ones cannot be zero either in a run that forwarded
    # packets: a packet costs instructions and cycles, and the core that forwarded it ran.
    positive: bool = False

    def impossible(self, value: float) -> str | None:
        """Why ``value`` cannot be a measurement of this metric, or None when it can."""
        if not math.isfinite(value):
            return "not a finite number"
        if value < 0:
            return f"{self.unit} cannot be negative"
        if value == 0 and self.positive:
            return f"{self.unit} must be > 0 in a run that forwarded packets"
        return None

    def is_regression(self, before: float, after: float) -> bool:
        """True when moving from ``before`` to ``after`` is a change for the worse."""
        if self.direction is Direction.LOWER_IS_BETTER:
            return after > before
        return after < before


_L, _H = Direction.LOWER_IS_BETTER, Direction.HIGHER_IS_BETTER
_HAZARD_FLOOR = 0.01  # per packet (per 1000 instructions): one event in 100 packets
_P, _S, _T = Backend.PMU, Backend.SIM, Backend.TSC

CATALOGUE: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("ipc", "instructions/cycle", _H, "instructions per cycle, idle polls included", frozenset({_P}), positive=True),
        Metric("eipc", "instructions/cycle", _H, "effective IPC: useful instructions per useful cycle", frozenset({_P}),
               positive=True),
        Metric("ipp", "instructions/packet", _L, "useful instructions per packet", frozenset({_P, _S}), positive=True),
        Metric("cpp", "cycles/packet", _L, "useful cycles per packet", frozenset({_P, _T}), positive=True),
        Metric("pps", "packets/s", _H, "packets forwarded per second in the window", frozenset({_P, _T}), positive=True),
        Metric("cur", "ratio", _H, "effective CPU use rate: useful cycles / all cycles", frozenset({_P, _T}), positive=True),
        Metric("cache_miss_rate", "ratio", _L, "cache misses / cache references", frozenset({_P})),
        Metric("cache_misses_pp", "misses/packet", _L, "cache misses per packet", frozenset({_P})),
        Metric("l1d_misses_pp", "misses/packet", _L, "L1 data-cache (load) misses per packet", frozenset({_P, _S})),
        Metric("llc_misses_pp", "misses/packet", _L, "last-level-cache (load) misses per packet", frozenset({_P, _S})),
        Metric("sf_blocks_pp", "blocks/packet", _L, "loads blocked by store forwarding per packet", frozenset({_P, _S}), _HAZARD_FLOOR),
        Metric("sf_blocks_pki", "blocks/kinstr", _L, "loads blocked by store forwarding per 1000 instructions", frozenset({_P, _S}), _HAZARD_FLOOR),
        Metric("split_loads_pp", "loads/packet", _L, "loads that cross a 64-byte cache line, per packet", frozenset({_P, _S}), _HAZARD_FLOOR),
        Metric("split_stores_pp", "stores/packet", _L, "stores that cross a 64-byte cache line, per packet", frozenset({_P, _S}), _HAZARD_FLOOR),
        # 4K aliases move with code and stack layout: every regression patch of dataplane/ moves
        # them by 5-37 %, an inlined helper that saves 6.5 % of the instructions by 18 %. Alerting
        # on them would flood; they explain the alerts of the metrics that cost cycles.
        Metric("alias_4k_pp", "loads/packet", _L, "loads that 4K-alias a store in flight (address bits 11:0 match), per packet",
               frozenset({_P, _S}), _HAZARD_FLOOR, alerts=False),
        # A load of a line a non-temporal store (MOVNTI, (V)MOVNTDQ/PS/PD) wrote: never forwarded, the
        # line left the caches, so a memory round trip (~1500 cycles measured on an Intel Xeon, 40 on an
        # AMD EPYC, against 7-14 for a store-forward block). No PMU event counts it: simulated only.
        Metric("nt_reloads_pp", "loads/packet", _L, "loads of lines a non-temporal store wrote (a memory round trip), per packet",
               frozenset({_S}), _HAZARD_FLOOR),
        Metric("branch_misses_pp", "misses/packet", _L, "branch mispredictions per packet", frozenset({_P})),
        # Scaling (a `scaling` config: the same commit at 1, 2, 4, ... N lcores; perfci_core.analysis.scaling)
        Metric("pps_max_lcores", "packets/s", _H, "packets per second at the most lcores a scaling run used", frozenset({_P, _T})),
        Metric("scaling_efficiency", "ratio", _H, "PPS(N) / (N x PPS(1)) at the most lcores N", frozenset({_P, _T})),
        # B exists only from three or more lcore counts (scaling.unidentified says why): absent, never 0
        Metric("serial_fraction", "ratio", _L, "Amdahl serial fraction B fitted to PPS at 3 or more lcore counts", frozenset({_P, _T})),
        # B with the clock and a sibling's share taken out (the calibration loop): the code's own
        Metric("serial_fraction_calibrated", "ratio", _L,
               "B fitted to PPS scaled by the calibration loop's slowdown from 1 lcore (the code's serial fraction)",
               frozenset({_P, _T})),
        # The dataplane's busy cycles per packet at N, raw and divided by the calibration loop, and the
        # loop itself: context beside throughput and B, which detection tests.
        Metric("cpp_max_lcores", "cycles/packet", _L, "busy TSC cycles per packet at the most lcores, over the lcores",
               frozenset({_P, _T}), alerts=False, positive=True),
        Metric("calibrated_cpp_max_lcores", "iterations/packet", _L,
               "busy cycles per packet at the most lcores / the calibration throughput loop's cycles per iteration",
               frozenset({_P, _T}), alerts=False, positive=True),
        Metric("calibration_dependent", "cycles/iteration", _L,
               "TSC cycles per iteration of the calibration's dependent multiply chain at the most lcores (the clock)",
               frozenset({_P, _T}), alerts=False, positive=True),
        Metric("calibration_throughput", "cycles/iteration", _L,
               "TSC cycles per iteration of the calibration's 8 independent chains at the most lcores (clock and sibling)",
               frozenset({_P, _T}), alerts=False, positive=True),
        # The bootstrap interval of B over a result's repetitions: context for plots and explanations;
        # detection tests the repetitions of serial_fraction itself.
        Metric("serial_fraction_low", "ratio", _L, "lower bound of the 95 % bootstrap interval of B", frozenset({_P, _T}), alerts=False),
        Metric("serial_fraction_high", "ratio", _L, "upper bound of the 95 % bootstrap interval of B", frozenset({_P, _T}), alerts=False),
        # Return on investment (the Bloomberg study) and energy (RAPL, package-wide)
        Metric("roi_cpu", "Mpps²/CPU", _H, "throughput² / busy CPUs of the forwarding lcores (T²/ΣCPU)", frozenset({_P, _T})),
        Metric("power_w", "W", _L, "average package power (RAPL) over the window; includes every core's work", frozenset({_P, _T})),
        Metric("energy_per_packet", "nJ/packet", _L, "package energy (RAPL) per forwarded packet", frozenset({_P, _T})),
        Metric("roi_power", "Mpps²/W", _H, "throughput² / package power (T²/P)", frozenset({_P, _T})),
        # What else ran on the package while its energy was read: context, never alerted on.
        Metric("other_cpus_busy", "CPUs", _L, "busy CPU-equivalents outside the forwarding lcores during the energy window",
               frozenset({_P, _T}), alerts=False),
        # Coherence traffic between lcores (simulated: memhazard's line-sharing model). Exactly 0
        # with one lcore, and 0 with several that share nothing per packet: any rise is a line
        # that lcores now pass between them, the cost that grows with the core count.
        Metric("line_transfers_pp", "transfers/packet", _L,
               "cache-line transfers between lcores per packet: stores to a line another lcore holds", frozenset({_S}),
               _HAZARD_FLOOR),
        Metric("read_transfers_pp", "transfers/packet", _L,
               "cache-line transfers between lcores per packet: loads of a line another lcore wrote", frozenset({_S}),
               _HAZARD_FLOOR),
    )
}


def impossible_count(value: float) -> str | None:
    """Why a raw count (events, cycles, packets, a clock rate) cannot be one, or None when it can."""
    if not math.isfinite(value):
        return "not a finite number"
    if value < 0:
        return "a count cannot be negative"
    return None


def get(name: str) -> Metric:
    """The catalogue entry for ``name``; KeyError names the known metrics."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; known: {', '.join(sorted(CATALOGUE))}") from None


@dataclass(frozen=True)
class IdleCalibration:
    """Cost of one empty poll, from a run with no offered traffic (pmu counts / empty polls)."""

    instructions_per_empty_poll: float
    cycles_per_empty_poll: float

    @classmethod
    def from_idle_run(cls, instructions: float, cycles: float, empty_polls: float) -> IdleCalibration:
        if empty_polls <= 0:
            raise ValueError("idle calibration saw no empty polls")
        return cls(instructions / empty_polls, cycles / empty_polls)


def _ratio(num: float | None, den: float | None, scale: float = 1.0) -> float | None:
    if num is None or den is None or den <= 0 or not math.isfinite(num) or not math.isfinite(den):
        return None
    return scale * num / den


def derive_tsc(raw: Mapping[str, float | None]) -> dict[str, float]:
    """CPP, PPS and CUR from the dataplane's rdtsc accounting (``tsc.*`` raw counts)."""
    packets, busy = raw.get("tsc.packets"), raw.get("tsc.busy_cycles")
    window, hz = raw.get("tsc.window_cycles"), raw.get("tsc.tsc_hz")
    out = {
        "cpp": _ratio(busy, packets),
        "cur": _ratio(busy, window),
        "pps": _ratio(packets, window, hz) if hz else None,
    }
    return {k: v for k, v in out.items() if v is not None}


def derive_pmu(raw: Mapping[str, float | None], idle: IdleCalibration | None) -> dict[str, float]:
    """Lean-model metrics from ``pmu.*`` counts of the window plus the dataplane's ``tsc.*`` poll counts.

    Without an idle calibration the idle share cannot be removed: eIPC, IPP, CPP and CUR are then
    not derived (IPC and the raw per-packet counters still are).
    """
    packets = raw.get("tsc.packets")
    instr, cycles = raw.get("pmu.instructions"), raw.get("pmu.cycles")
    out: dict[str, float | None] = {"ipc": _ratio(instr, cycles)}
    useful_instr = useful_cycles = None
    empty = raw.get("tsc.empty_polls")
    if idle is not None and empty is not None and instr is not None and cycles is not None:
        useful_instr = instr - empty * idle.instructions_per_empty_poll
        useful_cycles = cycles - empty * idle.cycles_per_empty_poll
        if useful_instr <= 0 or useful_cycles <= 0:
            useful_instr = useful_cycles = None  # calibration does not fit this run
    out["eipc"] = _ratio(useful_instr, useful_cycles)
    out["ipp"] = _ratio(useful_instr, packets)
    out["cpp"] = _ratio(useful_cycles, packets)
    out["cur"] = _ratio(useful_cycles, cycles)
    window, hz = raw.get("tsc.window_cycles"), raw.get("tsc.tsc_hz")
    out["pps"] = _ratio(packets, window, hz) if hz else None
    out["cache_miss_rate"] = _ratio(raw.get("pmu.cache_misses"), raw.get("pmu.cache_references"))
    out["cache_misses_pp"] = _ratio(raw.get("pmu.cache_misses"), packets)
    out["l1d_misses_pp"] = _ratio(raw.get("pmu.l1d_load_misses"), packets)
    out["llc_misses_pp"] = _ratio(raw.get("pmu.llc_load_misses"), packets)
    out["sf_blocks_pp"] = _ratio(raw.get("pmu.sf_blocks"), packets)
    out["sf_blocks_pki"] = _ratio(raw.get("pmu.sf_blocks"), instr, 1000.0)
    out["split_loads_pp"] = _ratio(raw.get("pmu.split_loads"), packets)
    out["split_stores_pp"] = _ratio(raw.get("pmu.split_stores"), packets)
    out["alias_4k_pp"] = _ratio(raw.get("pmu.alias_4k"), packets)
    out["branch_misses_pp"] = _ratio(raw.get("pmu.branch_misses"), packets)
    return {k: v for k, v in out.items() if v is not None}


# Raw keys ``sim.site.<hazard>.<function>@<file:line>``: where the simulator saw a hazard.
SITE_PREFIX = "sim.site."


def derive_sim(raw: Mapping[str, float | None]) -> dict[str, float]:
    """Simulated (valgrind) per-packet metrics: exact IPP of the forwarding function, memory
    hazards of the same window and cache-line transfers between lcores (memhazard), cache misses
    (cachegrind)."""
    packets = raw.get("sim.fwd_packets")
    out = {
        "ipp": _ratio(raw.get("sim.fwd_instructions"), packets),
        "sf_blocks_pp": _ratio(raw.get("sim.sf_blocks"), packets),
        "sf_blocks_pki": _ratio(raw.get("sim.sf_blocks"), raw.get("sim.fwd_instructions"), 1000.0),
        "split_loads_pp": _ratio(raw.get("sim.split_loads"), packets),
        "split_stores_pp": _ratio(raw.get("sim.split_stores"), packets),
        "alias_4k_pp": _ratio(raw.get("sim.alias_4k"), packets),
        "nt_reloads_pp": _ratio(raw.get("sim.nt_reloads"), packets),
        "line_transfers_pp": _ratio(raw.get("sim.line_transfers"), packets),
        "read_transfers_pp": _ratio(raw.get("sim.read_transfers"), packets),
        "l1d_misses_pp": _ratio(raw.get("sim.d1_misses"), raw.get("sim.cache_packets")),
        "llc_misses_pp": _ratio(raw.get("sim.ll_misses"), raw.get("sim.cache_packets")),
    }
    return {k: v for k, v in out.items() if v is not None}


def hazard_sites(raw: Mapping[str, float | None], packets_key: str = "sim.fwd_packets") -> dict[tuple[str, str], float]:
    """Per-packet hazard counts by (raw hazard name, site) from a sample's ``sim.site.*`` keys."""
    packets = raw.get(packets_key)
    out: dict[tuple[str, str], float] = {}
    for key, value in raw.items():
        if key.startswith(SITE_PREFIX) and value is not None and packets:
            kind, _, site = key[len(SITE_PREFIX):].partition(".")
            out[(kind, site)] = value / packets
    return out


# Raw keys ``sim.fn.<function>``: the window's self instructions of the largest functions, and
# ``sim.fn_other`` those of the rest (present only when some were left out).
FUNCTION_PREFIX = "sim.fn."
OTHER_FUNCTIONS_KEY = "sim.fn_other"
OTHER_FUNCTIONS = "(other functions)"


def function_instructions(raw: Mapping[str, float | None], packets_key: str = "sim.fwd_packets") -> dict[str, float]:
    """Self instructions per packet by function from a sample's ``sim.fn.*`` keys ({} when it has none),
    with the rest as :data:`OTHER_FUNCTIONS` when some were left out: a function absent then is unknown, not 0."""
    packets = raw.get(packets_key)
    if not packets:
        return {}
    out = {key[len(FUNCTION_PREFIX):]: value / packets for key, value in raw.items()
           if key.startswith(FUNCTION_PREFIX) and value is not None}
    other = raw.get(OTHER_FUNCTIONS_KEY)
    if out and other:
        out[OTHER_FUNCTIONS] = other / packets
    return out


def core_frequency_hz(raw: Mapping[str, float | None]) -> float | None:
    """Average core clock over the window: pmu cycles per window second (the lean model's Freq)."""
    window, hz = raw.get("tsc.window_cycles"), raw.get("tsc.tsc_hz")
    if not window or not hz:
        return None
    return _ratio(raw.get("pmu.cycles"), window / hz)


def change_text(change_pct: float) -> str:
    """A relative change in percent for people: "+2.90%", or "from zero" where a count starts at zero."""
    return f"{change_pct:+.2f}%" if math.isfinite(change_pct) else "from zero"
