"""Lean-model explanation of a change: which of IPP, eIPC and CUR moved CPP/PPS, and which
per-packet counters moved with it (docs/design.md, "The lean model").

The identities are multiplicative, so their log-ratios add up exactly:

    CPP = IPP / eIPC                 ->  ln(CPP'/CPP) = ln(IPP'/IPP) - ln(eIPC'/eIPC)
    PPS = Freq x CUR x eIPC / IPP    ->  ln(PPS'/PPS) = ln(Freq'/Freq) + ln(CUR'/CUR)
                                                       + ln(eIPC'/eIPC) - ln(IPP'/IPP)

Each factor present in both ``before`` and ``after`` gets its signed log contribution; whatever
the present factors do not account for is one ``other`` term (for PPS: the clock frequency, which
is not a metric; for CPP: the mismatch between the median of a ratio and the ratio of medians, or
a factor that was not measured), so the contributions always sum to the target's log change.
``share`` is each contribution divided by that total.

Scaling and energy (a scaling config; RAPL where readable) come first when they moved: "serial
fraction 0.02 → 0.31: throughput at 2 lcores −24.0 % while 1 lcore did not move" (cause
"scaling" when B got worse and the one-lcore throughput did not move: a shared cache line or a
lock per packet), and package power with what else ran on the package (RAPL counts every core).

Works with any subset: a ``sim`` alert has no cycles, so its explanation is IPP itself, with the
functions whose instructions moved ("+6.0 in ttl_decrement (new), −3.0 in fwd_burst": the sim
backend's per-function self instructions), the simulated memory hazards (store-forward blocks,
split accesses, cache-line transfers between lcores: stalls that cost cycles and no instructions,
each named with every function and line where it moved, the largest first) and the cache
counters. Its cause is "stalls" when a hazard got worse while IPP did not move, "several" when both
moved. Counters that move with code layout alone (the catalogue's non-alerting ones: 4K aliases)
are named only where a cycles figure can show what they cost (eIPC moved), never for an IPP move.

:func:`why` explains one metric for the row that shows it: an IPP row by its functions, a counter
row by its own sites, a CPP/PPS/eIPC/CUR row by the lean decomposition, a scaling row by the serial
fraction (and the simulated line sharing, when given).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from perfci_core import metrics as catalogue

# factor -> sign of its log-ratio in the target's log-ratio
_IDENTITIES: dict[str, dict[str, int]] = {
    "cpp": {"ipp": +1, "eipc": -1},
    "pps": {"cur": +1, "eipc": +1, "ipp": -1},
}

COUNTERS: dict[str, str] = {
    "sf_blocks_pp": "store-forward blocks per packet",
    "sf_blocks_pki": "store-forward blocks per 1000 instructions",
    "split_loads_pp": "cache-line-split loads per packet",
    "split_stores_pp": "cache-line-split stores per packet",
    "alias_4k_pp": "4K-aliasing loads per packet",
    "nt_reloads_pp": "non-temporal reloads per packet",
    "line_transfers_pp": "line transfers per packet",
    "read_transfers_pp": "read transfers per packet",
    "cache_misses_pp": "cache misses per packet",
    "l1d_misses_pp": "L1D misses per packet",
    "llc_misses_pp": "LLC misses per packet",
    "branch_misses_pp": "branch misses per packet",
}

# Memory hazards (stalls that cost cycles, not instructions) and the raw name their sites carry
# (perfci_core.metrics.hazard_sites): the explanation says where they happen.
HAZARDS: dict[str, str] = {"sf_blocks_pp": "sf_blocks", "sf_blocks_pki": "sf_blocks", "split_loads_pp": "split_loads",
                           "split_stores_pp": "split_stores", "alias_4k_pp": "alias_4k",
                           # a load of what a non-temporal store wrote: no forwarding, a memory round trip
                           "nt_reloads_pp": "nt_reloads",
                           # cache lines passed between lcores: a store waits for the line, a load for the data
                           "line_transfers_pp": "line_transfers", "read_transfers_pp": "read_transfers"}

Sites = Mapping[tuple[str, str], float]  # (hazard, "function@file:line") -> events per packet
Functions = Mapping[str, float]  # function -> self instructions per packet (metrics.function_instructions)

MAX_SITES = 4  # sites named per counter, the largest move first; "+N more" says how many were left out
MAX_FUNCTIONS = 4  # functions named per IPP move, likewise
FUNCTION_FLOOR = 0.01  # instructions per packet: a function that moved less (once in 100 packets) is not named
SCALING_METRICS = ("serial_fraction", "pps_max_lcores", "scaling_efficiency", "roi_cpu")
ENERGY_METRICS = ("power_w", "energy_per_packet", "roi_power")
SHARING = ("line_transfers_pp", "read_transfers_pp")

_FACTOR_WORDS = {"ipp": "instructions per packet", "eipc": "eIPC", "cur": "CUR", "other": "other"}


@dataclass(frozen=True)
class Contribution:
    factor: str  # ipp / eipc / cur / other
    before: float | None
    after: float | None
    rel_change: float  # of the factor itself (nan for `other`)
    log_contribution: float  # signed share of the target's log change
    share: float  # log_contribution / target log change (nan when the target did not move)


@dataclass(frozen=True)
class Decomposition:
    target: str  # cpp / pps
    before: float
    after: float
    rel_change: float
    log_change: float
    contributions: tuple[Contribution, ...]  # sums to log_change exactly (other included)


@dataclass(frozen=True)
class SiteMove:
    site: str  # "function (file:line)"
    before: float  # events per packet
    after: float

    @property
    def delta(self) -> float:
        return self.after - self.before


@dataclass(frozen=True)
class FunctionMove:
    function: str
    before: float  # self instructions per packet (0: did not run)
    after: float

    @property
    def delta(self) -> float:
        return self.after - self.before


@dataclass(frozen=True)
class CounterMove:
    metric: str
    before: float
    after: float
    ratio: float  # after / before (inf from zero)
    rel_change: float
    worse: bool  # by the catalogue's better-direction
    where: str | None = None  # hazards: the sites that moved, as the sentence names them
    sites: tuple[SiteMove, ...] = ()  # hazards: every site that moved with the count, the largest move first


@dataclass(frozen=True)
class Explanation:
    decompositions: tuple[Decomposition, ...]  # cpp first, then pps, as present
    counters: tuple[CounterMove, ...]  # moved counters, largest move first
    cause: str  # "instructions", "stalls", "busy time", "scaling", "several", "counters only", "unknown"
    sentence: str


def _usable(x: float | None) -> bool:
    return x is not None and math.isfinite(x) and x > 0


def _pct(r: float) -> str:
    s = f"{100 * r:+.1f} %"
    return s.replace("-", "\u2212")


def _num(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) < 1:
        return f"{v:.3f}" if abs(v) >= 0.001 else f"{v:.2e}"
    return f"{v:.4g}"


def decompose(target: str, before: Mapping[str, float], after: Mapping[str, float]) -> Decomposition | None:
    """Log decomposition of ``target`` (cpp or pps) over the factors present; None if absent."""
    tb, ta = before.get(target), after.get(target)
    if not (_usable(tb) and _usable(ta)):
        return None
    total = math.log(ta / tb)
    parts: list[Contribution] = []
    explained = 0.0
    for factor, sign in _IDENTITIES[target].items():
        fb, fa = before.get(factor), after.get(factor)
        if not (_usable(fb) and _usable(fa)):
            continue
        c = sign * math.log(fa / fb)
        explained += c
        parts.append(Contribution(factor, fb, fa, fa / fb - 1.0, c, c / total if total else math.nan))
    other = total - explained
    parts.append(Contribution("other", None, None, math.nan, other, other / total if total else math.nan))
    return Decomposition(target, tb, ta, ta / tb - 1.0, total, tuple(parts))


def sites_moved(hazard: str, sites_before: Sites, sites_after: Sites, worse: bool, floor: float = 0.0) -> list[SiteMove]:
    """Every site of ``hazard`` whose per-packet count moved in the direction of the change by more than
    ``floor`` (the catalogue's exact floor: rarer is no property of the path; all that moved when none
    did by that much), the largest move first (ties by name)."""
    sign = 1.0 if worse else -1.0
    moves = []
    for site in sorted({s for (h, s) in {*sites_before, *sites_after} if h == hazard}):
        b, a = sites_before.get((hazard, site), 0.0), sites_after.get((hazard, site), 0.0)
        if sign * (a - b) > 0:
            function, _, line = site.partition("@")
            moves.append(SiteMove(f"{function} ({line})" if line else function, b, a))
    moves.sort(key=lambda m: -abs(m.delta))
    return [m for m in moves if abs(m.delta) > floor] or moves


def _signed(v: float) -> str:
    text = f"{v:+.1f}" if abs(v) >= 0.1 else f"{v:+.2g}"
    return text.replace("-", "\u2212")


def _more(shown: list[str], total: int) -> str:
    return ", ".join(shown) + (f", +{total - len(shown)} more" if total > len(shown) else "")


def _sites_text(moves: list[SiteMove]) -> str | None:
    if not moves:
        return None
    if len(moves) == 1:
        return moves[0].site
    return _more([f"{_signed(m.delta)} in {m.site}" for m in moves[:MAX_SITES]], len(moves))


def function_moves(before: Functions, after: Functions) -> list[FunctionMove]:
    """Functions whose self instructions per packet moved by at least :data:`FUNCTION_FLOOR`, the largest
    move first. A side that lists only its largest functions (``OTHER_FUNCTIONS`` present) does not know
    the others: a function absent there is left out, not taken as new or gone."""
    if not before or not after:
        return []  # a side without per-function counts says nothing about where
    moves = []
    for name in sorted({*before, *after} - {catalogue.OTHER_FUNCTIONS}):
        if (name not in before and catalogue.OTHER_FUNCTIONS in before) or (name not in after and catalogue.OTHER_FUNCTIONS in after):
            continue
        move = FunctionMove(name, before.get(name, 0.0), after.get(name, 0.0))
        if abs(move.delta) >= FUNCTION_FLOOR:
            moves.append(move)
    return sorted(moves, key=lambda m: -abs(m.delta))


def functions_text(moves: list[FunctionMove]) -> str | None:
    """"+6.0 in ttl_decrement (new), −3.0 in fwd_burst", or None when no function moved."""
    def one(m: FunctionMove) -> str:
        status = " (new)" if m.before == 0 else " (gone)" if m.after == 0 else ""
        return f"{_signed(m.delta)} in {m.function}{status}"
    return _more([one(m) for m in moves[:MAX_FUNCTIONS]], len(moves)) if moves else None


def ipp_text(before: Mapping[str, float], after: Mapping[str, float], functions_before: Functions | None = None,
             functions_after: Functions | None = None) -> str | None:
    """"IPP +5.1 % (59.03 → 62.03 instructions per packet: +6.0 in ttl_decrement (new), −3.0 in fwd_burst)"."""
    b, a = before.get("ipp"), after.get("ipp")
    if not (_usable(b) and _usable(a)):
        return None
    where = functions_text(function_moves(functions_before or {}, functions_after or {})) if b != a else None
    return f"IPP {_pct(a / b - 1.0)} ({_num(b)} \u2192 {_num(a)} instructions per packet{': ' + where if where else ''})"


def counter_move(name: str, before: Mapping[str, float], after: Mapping[str, float], sites_before: Sites | None = None,
                 sites_after: Sites | None = None, floor: bool = True) -> CounterMove | None:
    """The move of one per-packet counter (with every site that moved, for a hazard), or None when it did
    not move (by more than the catalogue's exact floor, unless ``floor`` is False: a test decided it moved)."""
    b, a = before.get(name), after.get(name)
    if b is None or a is None or not (math.isfinite(b) and math.isfinite(a)) or b < 0 or a < 0 or b == a:
        return None
    m = catalogue.get(name)
    if floor and abs(a - b) <= m.exact_floor:
        return None  # a count too rare to be a property of the forwarding path
    ratio = a / b if b > 0 else math.inf
    worse = m.is_regression(b, a)
    sites = tuple(sites_moved(HAZARDS[name], sites_before or {}, sites_after or {}, worse, m.exact_floor)) if name in HAZARDS else ()
    return CounterMove(name, b, a, ratio, ratio - 1.0, worse, _sites_text(list(sites)), sites)


def counter_moves(before: Mapping[str, float], after: Mapping[str, float], threshold: float,
                  sites_before: Sites | None = None, sites_after: Sites | None = None) -> list[CounterMove]:
    """Per-packet counters whose relative change is at least ``threshold``, largest first;
    hazards name every site that moved when the samples' sites are given."""
    out = [c for name in COUNTERS if (c := counter_move(name, before, after, sites_before, sites_after)) is not None
           and abs(c.rel_change) >= threshold]
    out.sort(key=lambda c: -abs(math.log(c.ratio)) if 0 < c.ratio < math.inf else -math.inf)
    return out


def _counter_text(c: CounterMove) -> str:
    if c.ratio == math.inf:
        change = "from zero"
    elif c.ratio >= 2:
        change = f"\u00d7{c.ratio:.3g}"
    elif c.ratio <= 0.5:
        change = f"\u00f7{1 / c.ratio:.3g}" if c.ratio > 0 else "to zero"
    else:
        change = _pct(c.rel_change)
    text = f"{COUNTERS[c.metric]} {change} ({_num(c.before)} \u2192 {_num(c.after)})"
    if len(c.sites) > 1 and not c.metric.endswith("_pp"):  # the sites' moves are per packet, the count is not
        return f"{text} in " + _more([m.site for m in c.sites[:MAX_SITES]], len(c.sites))
    if c.where:
        return f"{text}: {c.where}" if len(c.sites) > 1 else f"{text} in {c.where}"
    return text


def _factor_text(p: Contribution, unchanged_below: float) -> str:
    word = _FACTOR_WORDS[p.factor]
    if abs(p.rel_change) < unchanged_below:
        return f"{word} unchanged"
    text = f"{word} {_pct(p.rel_change)}"
    if p.factor == "eipc":
        text += " (stalls)" if p.rel_change < 0 else " (fewer stalls)"
    elif p.factor == "cur":
        text += " (less busy time)" if p.rel_change < 0 else " (more busy time)"
    return text


SCALING_UNCHANGED_BELOW = 0.02  # one-lcore PPS "did not move": below the 1-3 % run-to-run noise of tsc
SERIAL_MOVED = 0.01  # a change of the serial fraction B (absolute) worth naming


def lcores_of(values: Mapping[str, float]) -> int | None:
    """N of a scaling result: PPS(N) / (E(N) · PPS(1)), rounded (exact per sample; medians differ by little)."""
    p_n, eff, p_1 = values.get("pps_max_lcores"), values.get("scaling_efficiency"), values.get("pps")
    if not (_usable(p_n) and _usable(eff) and _usable(p_1)):
        return None
    return round(p_n / (eff * p_1))


def _moved_text(rel: float) -> str:
    return f"{'rose' if rel > 0 else 'fell'} {abs(100 * rel):.0f} %"


def lcores_text(before: Mapping[str, float], after: Mapping[str, float]) -> tuple[str, bool] | None:
    """("throughput at 2 lcores fell 24 % while 1 lcore did not move", one-lcore unchanged), or None when
    the throughput at the most lcores was not measured on both sides."""
    n = lcores_of(after) or lcores_of(before)
    p0, p1 = before.get("pps_max_lcores"), after.get("pps_max_lcores")
    if not (_usable(p0) and _usable(p1)):
        return None
    text, one_still = f"throughput at {n or 'N'} lcores {_moved_text(p1 / p0 - 1.0)}", True
    s0, s1 = before.get("pps"), after.get("pps")
    if _usable(s0) and _usable(s1):
        r = s1 / s0 - 1.0
        one_still = abs(r) < SCALING_UNCHANGED_BELOW
        text += " while 1 lcore " + ("did not move" if one_still else _moved_text(r))
    return text, one_still


def scaling_text(before: Mapping[str, float], after: Mapping[str, float]) -> tuple[str, bool] | None:
    """("serial fraction 0.02 → 0.31: throughput at 2 lcores fell 24 % while 1 lcore did not move",
    one-lcore unchanged), or None when B was not measured on both sides or did not move."""
    b0, b1 = before.get("serial_fraction"), after.get("serial_fraction")
    if b0 is None or b1 is None or abs(b1 - b0) < SERIAL_MOVED:
        return None
    text = f"serial fraction {b0:.2f} \u2192 {b1:.2f}"
    lcores = lcores_text(before, after)
    return (f"{text}: {lcores[0]}", lcores[1]) if lcores else (text, True)


def sharing_text(before: Mapping[str, float], after: Mapping[str, float], sites_before: Sites | None = None,
                 sites_after: Sites | None = None) -> str | None:
    """The simulated line sharing between lcores that moved, with its sites, from a ``sim`` config's
    metrics ("sim: line transfers per packet ×24.8 (0.024 → 0.596) in forward_one (fwd.c:175)"): what a
    serial fraction's move is explained by. None when neither count moved."""
    moves = [c for name in SHARING if (c := counter_move(name, before, after, sites_before, sites_after)) is not None]
    return "sim: " + "; ".join(_counter_text(c) for c in moves) if moves else None


def energy_text(before: Mapping[str, float], after: Mapping[str, float], unchanged_below: float) -> str | None:
    """Package power and energy per packet when measured on both sides, with what else ran."""
    w0, w1 = before.get("power_w"), after.get("power_w")
    if not (_usable(w0) and _usable(w1)):
        return None
    text = f"package power {_pct(w1 / w0 - 1.0)} ({w0:.1f} \u2192 {w1:.1f} W"
    e0, e1 = before.get("energy_per_packet"), after.get("energy_per_packet")
    if _usable(e0) and _usable(e1):
        text += f", {_num(e0)} \u2192 {_num(e1)} nJ/packet"
    text += ")"
    o0, o1 = before.get("other_cpus_busy"), after.get("other_cpus_busy")
    if o0 is not None and o1 is not None:
        text += f"; RAPL counts the whole package: other CPUs were busy {o0:.2f} \u2192 {o1:.2f} CPUs over the window"
    else:
        text += "; RAPL counts the whole package, other cores' work included"
    return text


def explain(before: Mapping[str, float], after: Mapping[str, float], *, unchanged_below: float = 0.005,
            counter_threshold: float = 0.10, sites_before: Sites | None = None, sites_after: Sites | None = None,
            functions_before: Functions | None = None, functions_after: Functions | None = None,
            sharing: str | None = None) -> Explanation:
    """Explain one commit range from before/after medians of any lean-model metrics.

    ``unchanged_below``: a factor moving less than this (relative) is called unchanged.
    ``counter_threshold``: a counter must move at least this much (relative) to be named.
    ``sites_before`` / ``sites_after``: per-packet hazard counts by site (simulated), to say where.
    ``functions_before`` / ``functions_after``: self instructions per packet by function (simulated), to
    say where an IPP move came from. ``sharing``: :func:`sharing_text` of a ``sim`` config over the same
    range, said with a serial fraction that moved.
    """
    decs = tuple(d for d in (decompose("cpp", before, after), decompose("pps", before, after)) if d)
    eipc_moved = any(p.factor == "eipc" and abs(p.rel_change) >= unchanged_below for d in decs for p in d.contributions)
    # a layout-sensitive count (non-alerting) is named only where a cycles figure shows what it cost
    counters = tuple(c for c in counter_moves(before, after, counter_threshold, sites_before, sites_after)
                     if eipc_moved or catalogue.get(c.metric).alerts)
    stalls = any(c.metric in HAZARDS and c.worse for c in counters)
    named = {c.metric for c in counters}
    # the per-1000-instructions rate says nothing the per-packet count has not said already
    shown = [c for c in counters if not (c.metric == "sf_blocks_pki" and "sf_blocks_pp" in named)]
    counters_text = "; ".join(_counter_text(c) for c in shown[:3])

    ipp = ipp_text(before, after, functions_before, functions_after)
    if decs:
        d = decs[0]
        factors = [p for p in d.contributions if p.factor != "other"]
        moved = [p for p in factors if abs(p.rel_change) >= unchanged_below]
        cause = _cause(d, moved)
        head = f"{d.target.upper()} {_pct(d.rel_change)}"
        parts = [_factor_text(p, unchanged_below) for p in factors]
        other = d.contributions[-1]
        if factors and abs(other.log_contribution) >= unchanged_below:
            what = "clock frequency/other" if d.target == "pps" else "other"
            parts.append(f"{what} {_pct(math.expm1(other.log_contribution))}")
        sentence = head + (": " + ", ".join(parts) if parts else "")
    elif ipp is not None:
        r = after["ipp"] / before["ipp"] - 1.0
        if stalls:  # a simulated stall: it costs cycles whatever the instruction count did
            cause = "several" if abs(r) >= unchanged_below else "stalls"
        else:
            cause = "instructions" if abs(r) >= unchanged_below else ("counters only" if counters else "unknown")
        sentence = ipp
    else:
        cause = "counters only" if counters else "unknown"
        sentence = "no CPP, PPS or IPP measured"
    if counters_text:
        sentence += ": " + counters_text
    elif decs or "ipp" in before:
        sentence += "; no per-packet counter moved"
    scaled = scaling_text(before, after)
    if scaled is not None:
        text, one_lcore_still = scaled
        worse = catalogue.get("serial_fraction").is_regression(before["serial_fraction"], after["serial_fraction"])
        if worse and one_lcore_still:
            cause = "scaling"  # costs nothing on one lcore: shared data or a lock between lcores
        if sharing:
            text += f"; {sharing}"
        # one lcore unchanged and no counter moved: its "CPP +0.1 %" would only blur the point
        sentence = text if one_lcore_still and not counters_text else f"{text}; {sentence}"
    power = energy_text(before, after, unchanged_below)
    if power is not None:
        sentence += f"; {power}"
    return Explanation(decs, counters, cause, sentence)


def why(metric: str, before: Mapping[str, float], after: Mapping[str, float], *, sites_before: Sites | None = None,
        sites_after: Sites | None = None, functions_before: Functions | None = None, functions_after: Functions | None = None,
        sharing: str | None = None) -> str:
    """What explains ``metric``'s move, for the row that shows it (never another metric's story): IPP by the
    functions whose instructions moved, a counter by its own move and every site where it moved, a scaling
    metric by the serial fraction and the lcores' throughput (and ``sharing``), an energy metric by the
    package power; CPP, PPS, eIPC, CUR and the rest by the lean model's decomposition. "" when the values
    needed are not there."""
    if metric == "ipp":
        return ipp_text(before, after, functions_before, functions_after) or ""
    if metric in COUNTERS:
        move = counter_move(metric, before, after, sites_before, sites_after, floor=False)
        return _counter_text(move) if move is not None else ""
    if metric in SCALING_METRICS:
        scaled = scaling_text(before, after) or lcores_text(before, after)
        return "; ".join(t for t in (scaled[0] if scaled else None, sharing) if t)
    if metric in ENERGY_METRICS:
        return energy_text(before, after, 0.0) or ""
    return explain(before, after, sites_before=sites_before, sites_after=sites_after, functions_before=functions_before,
                   functions_after=functions_after).sentence


def _cause(d: Decomposition, moved: list[Contribution]) -> str:
    if not moved:
        return "unknown"
    big = [p for p in moved if abs(p.share) >= 0.25]
    if len(big) != 1:
        return "several" if len(big) > 1 else "unknown"
    return {"ipp": "instructions", "eipc": "stalls", "cur": "busy time"}[big[0].factor]
