"""Is the host tuned for benchmarking? Each check that fails is a deviation (never fatal).

Follows the CSIT calibration idea: performance governor, turbo off, the forwarding core isolated
from the scheduler and from timer ticks, no SMT sibling, bare metal. A deviation does not stop the
measurement; it is recorded in the result so that the server and a reader can weigh the numbers.
"""

from __future__ import annotations

from pathlib import Path

from perfci_core.result import Tuning

from .cpuinfo import SYS_CPU, parse_cpulist, read_sys


def check(core: int, fp: dict, sys_cpu: Path = SYS_CPU, cmdline: str | None = None) -> Tuning:
    deviations: list[str] = []
    gov = fp.get("governor")
    if gov is None:
        deviations.append(f"cpu{core}: no cpufreq governor exposed (frequency not controlled by this host)")
    elif gov != "performance":
        deviations.append(f"cpu{core}: scaling_governor is {gov!r}, not 'performance'")
    if fp.get("turbo") is True:
        deviations.append("turbo/boost is enabled (clock varies with load and temperature)")
    if fp.get("smt") is True:
        siblings = parse_cpulist(read_sys(sys_cpu / f"cpu{core}" / "topology" / "thread_siblings_list"))
        if len(siblings) > 1:
            deviations.append(f"cpu{core} shares its core with SMT siblings {sorted(siblings - {core})}")
    isolated = parse_cpulist(read_sys(sys_cpu / "isolated"))
    if core not in isolated:
        deviations.append(f"cpu{core} is not isolated (isolcpus); the scheduler may run other tasks on it")
    nohz = parse_cpulist(read_sys(sys_cpu / "nohz_full"))
    if core not in nohz:
        deviations.append(f"cpu{core} is not nohz_full (timer ticks interrupt the forwarding loop)")
    if fp.get("hypervisor"):
        deviations.append("running under a hypervisor: steal time and no PMU pass-through are likely")
    if (fp.get("hugepages_total") or 0) == 0:
        deviations.append("no hugepages reserved (EAL runs with --no-huge)")
    return Tuning(ok=not deviations, deviations=deviations)
