"""memhazard's output file -> :class:`HazardReport`.

The file (``memhazard 4``) is ``key value`` lines (totals, and the model: family, sizes, store-commit rule;
the non-temporal stores and their reloads where the tool models them), one ``function COUNT NAME`` line per
function that ran in the window (its self instructions: the symbol's own code and what is inlined into it,
as callgrind counts them), then one ``site KIND COUNT | FRAME | FRAME ...`` line per instruction address and
hazard kind; a blocked load's line also has ``dist=MIN,MEDIAN,MAX`` after its count, the distances in
instructions from the load back to the store it waited for. Each frame is valgrind's description of the
address, ``0xADDR: FUNCTION (FILE:LINE)`` (``???`` and ``(in OBJECT)`` without debug info), the innermost
inlined call first. A site is named after the innermost frame in the program's own
sources: a compiler intrinsic or a DPDK inline from a system header (``/usr/...``) is a detail
of the function that used it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

KINDS = ("sf_blocked", "sf_forwarded", "split_loads", "split_stores", "alias_4k", "line_transfers", "read_transfers")
# Non-temporal stores (tool/mh_main.c, "Non-temporal stores"): how many the window made, the loads of
# the lines they wrote (a kind with sites of its own), and the lines beyond the tool's table. A file
# without them is of a tool that had no such model: absent, not zero.
NONTEMPORAL_KEYS = ("nt_stores", "nt_reloads", "nt_untracked")
SITE_KINDS = (*KINDS, "nt_reloads")
HEADER = "memhazard 4"
# When a store leaves the buffer (tool/mh_main.c, "Store commit"): estimated time, or ROB instructions.
COMMIT_RULES = ("time", "rob")
DEFAULT_COMMIT_RULE = "time"
# The window's fences by kind, and which of them drained the store buffer in all ("drains"):
# MFENCE, serializing and locked instructions do, LFENCE, SFENCE and RDTSCP do not (tool/mh_main.c, "Fences").
FENCE_KEYS = ("mfence", "lfence", "sfence", "rdtscp", "serializing", "locked", "drains")
# How the cache-line sharing model went (tool/mh_main.c, "Sharing" and "Time"): threads that ran
# the window, lines it tracked, and what it could not follow (never expected on the dataplane).
SHARING_KEYS = ("forwarding_threads", "lines_tracked", "untracked_lines", "untracked_thread_accesses", "logged_accesses",
                "late_accesses")
_FUNCTION = re.compile(r"^function (\d+) (.+)$")
_SITE = re.compile(r"^site (\w+) (\d+)(?: dist=(\d+),(\d+),(\d+))?((?: \| .*)+)$")
_FRAME = re.compile(r"^0x[0-9A-Fa-f]+: (.*?)(?: \((in )?([^()]*)\))?$")
SYSTEM_PREFIXES = ("/usr/", "/lib/")


def _frame(text: str) -> tuple[str, str, bool]:
    """(function, "file:line" or object, whether it is the program's own source)."""
    m = _FRAME.match(text.strip())
    if not m:
        raise ValueError(f"malformed frame {text!r}")
    function, in_object, where = m.group(1).strip(), bool(m.group(2)), (m.group(3) or "").strip()
    own = bool(where) and not in_object and not where.startswith(SYSTEM_PREFIXES)
    return function, where.rsplit("/", 1)[-1], own


def site_of(frames: list[str]) -> tuple[str, str]:
    """The innermost frame in the program's own sources, else the innermost one."""
    parsed = [_frame(f) for f in frames]
    function, where, _ = next((p for p in parsed if p[2]), parsed[0])
    return function, where


@dataclass(frozen=True)
class Distance:
    """Instructions from a blocked load back to its store, over a site's blocks."""
    min: int
    median: int  # the tool's histogram stops at 1023: a median of 1023 means "that many or more"
    max: int

    def __str__(self) -> str:
        return f"{self.min}/{self.median}/{self.max}"


@dataclass(frozen=True)
class Site:
    kind: str
    count: int
    function: str
    where: str  # "fwd.c:97", or the object file when there is no line information
    distance: Distance | None = None  # sf_blocked sites only

    @property
    def label(self) -> str:
        return f"{self.function}@{self.where}" if self.where else self.function


def merge_sites(sites: list[Site]) -> Site:
    """Sites of one function and line (several instruction addresses) as one: counts add up, the
    distance range spans them all, the median is the busiest address's (the tool keeps no more)."""
    first = sites[0]
    dists = [s.distance for s in sites if s.distance]
    busiest = max((s for s in sites if s.distance), key=lambda s: s.count, default=None)
    distance = Distance(min(d.min for d in dists), busiest.distance.median, max(d.max for d in dists)) if busiest else None
    return Site(first.kind, sum(s.count for s in sites), first.function, first.where, distance)


@dataclass(frozen=True)
class HazardReport:
    family: str
    store_buffer: int
    rob: int
    commit_rule: str  # COMMIT_RULES
    window_fn: str
    windows: int
    instructions: int
    loads: int
    stores: int
    counts: dict[str, int]
    sites: tuple[Site, ...] = field(default=())
    sharing: dict[str, int] = field(default_factory=dict)  # SHARING_KEYS
    fences: dict[str, int] = field(default_factory=dict)  # FENCE_KEYS
    nontemporal: dict[str, int] = field(default_factory=dict)  # NONTEMPORAL_KEYS, when the tool has the model
    functions: dict[str, int] = field(default_factory=dict)  # self instructions in the window, by symbol

    def top_sites(self, kind: str, n: int) -> list[Site]:
        """The ``n`` sites of ``kind`` with the most events; sites of one function and line merged."""
        groups: dict[tuple[str, str], list[Site]] = defaultdict(list)
        for s in self.sites:
            if s.kind == kind:
                groups[(s.function, s.where)].append(s)
        merged = [merge_sites(g) for g in groups.values()]
        return sorted(merged, key=lambda s: (-s.count, s.function, s.where))[:n]


def parse_report(text: str) -> HazardReport:
    """Parse a memhazard output file; ValueError names what is missing or malformed."""
    values: dict[str, str] = {}
    sites: list[Site] = []
    functions: dict[str, int] = {}
    lines = text.splitlines()
    if not lines or not lines[0].startswith("memhazard "):
        raise ValueError(f"not a memhazard output file (no '{HEADER}' header)")
    if lines[0].strip() != HEADER:
        raise ValueError(f"memhazard output of another version ({lines[0].strip()!r}, expected {HEADER!r}): rebuild the tool")
    for line in lines[1:]:
        if line.startswith("site "):
            m = _SITE.match(line)
            if not m or m.group(1) not in SITE_KINDS:
                raise ValueError(f"malformed site line: {line!r}")
            function, where = site_of(m.group(6).split(" | ")[1:])
            distance = Distance(*(int(m.group(i)) for i in (3, 4, 5))) if m.group(3) else None
            if (distance is None) != (m.group(1) != "sf_blocked"):
                raise ValueError(f"malformed site line (a blocked load, and only one, has dist=): {line!r}")
            sites.append(Site(m.group(1), int(m.group(2)), function, where, distance))
        elif line.startswith("function "):
            m = _FUNCTION.match(line)
            if not m:
                raise ValueError(f"malformed function line: {line!r}")
            functions[m.group(2)] = functions.get(m.group(2), 0) + int(m.group(1))
        elif line.strip():
            key, _, value = line.partition(" ")
            values[key] = value.strip()
    if values.get("commit_rule", COMMIT_RULES[0]) not in COMMIT_RULES:
        raise ValueError(f"memhazard output has an unknown commit_rule {values['commit_rule']!r} (known: {', '.join(COMMIT_RULES)})")
    try:
        return HazardReport(
            family=values["family"], store_buffer=int(values["store_buffer"]), rob=int(values["rob"]),
            commit_rule=values["commit_rule"],
            window_fn=values["window_fn"], windows=int(values["windows"]), instructions=int(values["instructions"]),
            loads=int(values["loads"]), stores=int(values["stores"]), counts={k: int(values[k]) for k in KINDS},
            sites=tuple(sites), sharing={k: int(values[k]) for k in SHARING_KEYS},
            fences={k: int(values[k]) for k in FENCE_KEYS}, functions=functions,
            nontemporal={k: int(values[k]) for k in NONTEMPORAL_KEYS} if NONTEMPORAL_KEYS[0] in values else {},
        )
    except KeyError as exc:  # a non-temporal model is all three keys or none
        raise ValueError(f"memhazard output lacks {exc.args[0]!r}") from None
    except ValueError as exc:
        raise ValueError(f"memhazard output has a malformed count: {exc}") from None
