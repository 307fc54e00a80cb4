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

Works with any subset: a ``sim`` alert has no cycles, so its explanation is IPP itself, the
simulated memory hazards (store-forward blocks, split accesses, 4K aliases, cache-line transfers
between lcores: stalls that cost cycles and no instructions, named with the function and line
where they moved) and the cache counters. Its cause is "stalls" when a hazard got worse while IPP did not move, "several" when
both moved.
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
class CounterMove:
    metric: str
    before: float
    after: float
    ratio: float  # after / before (inf from zero)
    rel_change: float
    worse: bool  # by the catalogue's better-direction
    where: str | None = None  # hazards: the function (and line) whose count moved most


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


def where_moved(hazard: str, sites_before: Sites, sites_after: Sites, worse: bool) -> str | None:
    """The site of ``hazard`` whose per-packet count moved most in the direction of the change."""
    moves = {site: sites_after.get((hazard, site), 0.0) - sites_before.get((hazard, site), 0.0)
             for (h, site) in {*sites_before, *sites_after} if h == hazard}
    sign = 1.0 if worse else -1.0
    best = max(moves.items(), key=lambda kv: (sign * kv[1], kv[0]), default=None)
    if best is None or sign * best[1] <= 0:
        return None
    function, _, line = best[0].partition("@")
    return f"{function} ({line})" if line else function


def counter_moves(before: Mapping[str, float], after: Mapping[str, float], threshold: float,
                  sites_before: Sites | None = None, sites_after: Sites | None = None) -> list[CounterMove]:
    """Per-packet counters whose relative change is at least ``threshold``, largest first;
    hazards name the site that moved most when the samples' sites are given."""
    out = []
    for name in COUNTERS:
        b, a = before.get(name), after.get(name)
        if b is None or a is None or not (math.isfinite(b) and math.isfinite(a)) or b < 0 or a < 0:
            continue
        if b == a:
            continue
        ratio = a / b if b > 0 else math.inf
        rel = ratio - 1.0
        if abs(rel) < threshold:
            continue
        m = catalogue.get(name)
        if abs(a - b) <= m.exact_floor:
            continue  # a count too rare to be a property of the forwarding path
        worse = m.is_regression(b, a)
        where = where_moved(HAZARDS[name], sites_before or {}, sites_after or {}, worse) if name in HAZARDS else None
        out.append(CounterMove(name, b, a, ratio, rel, worse, where))
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
    return f"{text} in {c.where}" if c.where else text


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


def scaling_text(before: Mapping[str, float], after: Mapping[str, float]) -> tuple[str, bool] | None:
    """("serial fraction 0.02 → 0.31: throughput at 2 lcores fell 24 % while 1 lcore did not move",
    one-lcore unchanged), or None when B was not measured on both sides or did not move."""
    b0, b1 = before.get("serial_fraction"), after.get("serial_fraction")
    if b0 is None or b1 is None or abs(b1 - b0) < SERIAL_MOVED:
        return None
    text = f"serial fraction {b0:.2f} \u2192 {b1:.2f}"
    n = lcores_of(after) or lcores_of(before)
    p0, p1 = before.get("pps_max_lcores"), after.get("pps_max_lcores")
    one_still = True
    if _usable(p0) and _usable(p1):
        text += f": throughput at {n or 'N'} lcores {_moved_text(p1 / p0 - 1.0)}"
        s0, s1 = before.get("pps"), after.get("pps")
        if _usable(s0) and _usable(s1):
            r = s1 / s0 - 1.0
            one_still = abs(r) < SCALING_UNCHANGED_BELOW
            text += " while 1 lcore " + ("did not move" if one_still else _moved_text(r))
    return text, one_still


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
            counter_threshold: float = 0.10, sites_before: Sites | None = None, sites_after: Sites | None = None) -> Explanation:
    """Explain one commit range from before/after medians of any lean-model metrics.

    ``unchanged_below``: a factor moving less than this (relative) is called unchanged.
    ``counter_threshold``: a counter must move at least this much (relative) to be named.
    ``sites_before`` / ``sites_after``: per-packet hazard counts by site (simulated), to say where.
    """
    decs = tuple(d for d in (decompose("cpp", before, after), decompose("pps", before, after)) if d)
    counters = tuple(counter_moves(before, after, counter_threshold, sites_before, sites_after))
    stalls = any(c.metric in HAZARDS and c.worse for c in counters)
    named = {c.metric for c in counters}
    # the per-1000-instructions rate says nothing the per-packet count has not said already
    shown = [c for c in counters if not (c.metric == "sf_blocks_pki" and "sf_blocks_pp" in named)]
    counters_text = ", ".join(_counter_text(c) for c in shown[:3])

    if decs:
        d = decs[0]
        named = [p for p in d.contributions if p.factor != "other"]
        moved = [p for p in named if abs(p.rel_change) >= unchanged_below]
        cause = _cause(d, moved)
        head = f"{d.target.upper()} {_pct(d.rel_change)}"
        parts = [_factor_text(p, unchanged_below) for p in named]
        other = d.contributions[-1]
        if named and abs(other.log_contribution) >= unchanged_below:
            what = "clock frequency/other" if d.target == "pps" else "other"
            parts.append(f"{what} {_pct(math.expm1(other.log_contribution))}")
        sentence = head + (": " + ", ".join(parts) if parts else "")
    elif _usable(before.get("ipp")) and _usable(after.get("ipp")):
        r = after["ipp"] / before["ipp"] - 1.0
        if stalls:  # a simulated stall: it costs cycles whatever the instruction count did
            cause = "several" if abs(r) >= unchanged_below else "stalls"
        else:
            cause = "instructions" if abs(r) >= unchanged_below else ("counters only" if counters else "unknown")
        sentence = f"IPP {_pct(r)} ({_num(before['ipp'])} \u2192 {_num(after['ipp'])} instructions per packet)"
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
        # one lcore unchanged and no counter moved: its "CPP +0.1 %" would only blur the point
        sentence = text if one_lcore_still and not counters_text else f"{text}; {sentence}"
    power = energy_text(before, after, unchanged_below)
    if power is not None:
        sentence += f"; {power}"
    return Explanation(decs, counters, cause, sentence)


def _cause(d: Decomposition, moved: list[Contribution]) -> str:
    if not moved:
        return "unknown"
    big = [p for p in moved if abs(p.share) >= 0.25]
    if len(big) != 1:
        return "several" if len(big) > 1 else "unknown"
    return {"ipp": "instructions", "eipc": "stalls", "cur": "busy time"}[big[0].factor]
