"""The memory-hazard simulator of the ``sim`` backend.

``tool/`` holds memhazard, a small valgrind tool (C, built with meson against the tool SDK that
Debian's valgrind package ships). In the same window as callgrind's ``--toggle-collect=fwd_burst``
it counts the instructions (identical to callgrind's count) and replays every load and store
through a store-buffer model of one microarchitecture family: loads blocked by store forwarding,
loads and stores split across a cache line, loads that 4K-alias a store in flight, loads of lines a
non-temporal store wrote (never forwarded: a memory round trip), each also per function and source line. With several threads (one per lcore) it also counts the cache-line
transfers between them that a coherent cache would make (stores to lines another thread holds,
loads of lines another thread wrote), with the threads' accesses ordered as cores running in
lockstep would make them, whatever order valgrind ran them in. The family rules and sizes, with their sources, are in
``tool/mh_main.c``; :mod:`.family` picks one from CPUID. When a store has left the buffer follows one of two
rules (:data:`COMMIT_RULES`, ``--commit-rule``): ``time`` (the default) estimates when it retired and committed
at the family's widths, ``rob`` keeps it for ROB instructions; every report records which.

- :mod:`.tool`   builds the tool once per source version and assembles the ``VALGRIND_LIB`` folder
- :mod:`.family` CPUID -> family name (the default model when the CPU is not one the tool knows)
- :mod:`.report` reads the tool's output file
"""

from .family import DEFAULT_FAMILY, FAMILIES, FamilyChoice, family_for, recorded_family
from .report import COMMIT_RULES, DEFAULT_COMMIT_RULE, KINDS, NONTEMPORAL_KEYS, Distance, HazardReport, Site, parse_report
from .tool import ToolUnavailable, memhazard_lib

__all__ = [
    "DEFAULT_FAMILY", "FAMILIES", "FamilyChoice", "family_for", "recorded_family", "COMMIT_RULES", "DEFAULT_COMMIT_RULE", "KINDS",
    "NONTEMPORAL_KEYS",
    "Distance", "HazardReport", "Site", "parse_report",
    "ToolUnavailable", "memhazard_lib",
]
