"""Parse `perf stat` output: CSV (`-x,`) and JSON lines (`-j`).

perf prints one record per counter on stderr. Both formats carry the same fields:

    CSV : value,unit,event,[variance%,]runtime,pcnt-running,metric-value,metric-unit
          (with -I an interval timestamp comes first; -A/--per-* add aggregation columns,
          which the agent never uses)
    JSON: {"counter-value": "...", "unit": "", "event": "...", "event-runtime": N,
           "pcnt-running": P, ...}

Rules (docs/design.md, "Measurement"):
- ``<not supported>`` and ``<not counted>`` are *absent*: value None with the status kept, never 0.
- A count whose event ran less than 100 % of the time was scaled by perf (multiplexing): the
  running percentage is kept and :attr:`Count.multiplexed` flags it.
- Lines that are not counters (blank, ``# started on``, "Events enabled", metric-group rows and
  metric-only JSON objects) are skipped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterable

NOT_SUPPORTED = "<not supported>"
NOT_COUNTED = "<not counted>"
_ABSENT = {NOT_SUPPORTED: "not supported", NOT_COUNTED: "not counted"}


@dataclass(frozen=True)
class Count:
    event: str  # as perf printed it, e.g. "cycles", "cpu_core/cycles/", "cycles:u"
    value: float | None  # None: absent (see status)
    status: str  # "ok" | "not supported" | "not counted"
    unit: str = ""
    runtime: float | None = None  # ns the event was enabled and running
    running_pct: float | None = None  # perf's pcnt-running

    @property
    def multiplexed(self) -> bool:
        """True when perf scaled the count because the event ran less than 100 % of the time."""
        return self.value is not None and self.running_pct is not None and self.running_pct < 100.0

    @property
    def base(self) -> str:
        return base_event(self.event)

    @property
    def pmu(self) -> str | None:
        m = _PMU_EVENT.match(self.event)
        return m.group(1) if m else None


_PMU_EVENT = re.compile(r"^([A-Za-z0-9_.-]+)/([^/]+)/([a-zA-Z]*)$")


def base_event(name: str) -> str:
    """The event name without PMU wrapper or modifiers: ``cpu_core/cycles/`` -> ``cycles``,
    ``cycles:u`` -> ``cycles``. Raw PMU terms (``cpu/event=0x3c/``) are returned unchanged."""
    m = _PMU_EVENT.match(name)
    if m and "=" not in m.group(2):
        name = m.group(2)
    if ":" in name and "/" not in name:
        name = name.split(":", 1)[0]
    return name


def _number(text: str) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _value(text: str) -> tuple[float | None, str] | None:
    text = text.strip()
    if text in _ABSENT:
        return None, _ABSENT[text]
    v = _number(text)
    if v is None:
        return None
    return v, "ok"


def parse_csv(text: str, sep: str = ",") -> list[Count]:
    """Counters from ``perf stat -x<sep>`` output (perf's stderr)."""
    out: list[Count] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        f = line.split(sep)
        if len(f) < 3:
            continue  # "Events enabled", error text
        # -I: a leading timestamp, then a value field (a number or an absent marker).
        if len(f) >= 4 and _number(f[0]) is not None and _value(f[1]) is not None and _number(f[2]) is None and f[3]:
            f = f[1:]
        parsed = _value(f[0])
        if parsed is None or not f[2].strip():
            continue  # metric-group rows (",225849327050,100.00,,,,TopdownL1"), junk
        value, status = parsed
        rest = f[3:]
        if rest and rest[0].strip().endswith("%"):
            rest = rest[1:]  # -r: variance column
        runtime = _number(rest[0]) if len(rest) > 0 else None
        pct = _number(rest[1]) if len(rest) > 1 else None
        out.append(Count(f[2].strip(), value, status, f[1].strip(), runtime, pct))
    return out


def parse_json(text: str) -> list[Count]:
    """Counters from ``perf stat -j`` output (one JSON object per line)."""
    out: list[Count] = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "event" not in obj or "counter-value" not in obj:
            continue  # metric-only or metricgroup objects
        parsed = _value(str(obj["counter-value"]))
        if parsed is None:
            continue
        value, status = parsed
        runtime = obj.get("event-runtime")
        pct = obj.get("pcnt-running")
        out.append(
            Count(
                str(obj["event"]),
                value,
                status,
                str(obj.get("unit", "")),
                float(runtime) if isinstance(runtime, (int, float)) else _number(str(runtime or "")),
                float(pct) if isinstance(pct, (int, float)) else _number(str(pct or "")),
            )
        )
    return out


def parse(text: str) -> list[Count]:
    """Either format, detected from the first counter-looking line."""
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("{"):
            return parse_json(text)
        if "," in s and not s.startswith("#"):
            return parse_csv(text)
    return []


def by_event(counts: Iterable[Count]) -> dict[str, Count]:
    """Index counts by the event name perf printed (last one wins for interval output)."""
    return {c.event: c for c in counts}


def lookup(counts: Iterable[Count], event: str, pmu: str | None = None) -> Count | None:
    """The count for ``event`` (exact name first, then by base name on ``pmu`` if given).

    Hybrid parts print one row per core PMU; those are never summed — ask for the PMU you pinned to.
    """
    counts = list(counts)
    for c in counts:
        if c.event == event:
            return c
    base = base_event(event)
    matches = [c for c in counts if c.base == base and (pmu is None or c.pmu == pmu)]
    if len(matches) == 1:
        return matches[0]
    return None
