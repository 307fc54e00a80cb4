"""What else the host was doing while a measurement ran: load averages, CPU steal, runnable tasks.

Cheap reads of ``/proc`` only (``os.getloadavg`` and ``/proc/stat``): steal is the share of CPU
time the hypervisor gave to other guests between two snapshots; ``procs_running`` the tasks that
wanted a CPU at the end. Where ``/proc/stat`` is unreadable the fields are None, never guessed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class CpuSnapshot:
    total: int  # every jiffy of every CPU (the aggregate "cpu" line)
    steal: int


def cpu_snapshot(path: Path = PROC_STAT) -> CpuSnapshot | None:
    """The aggregate ``cpu`` line of ``/proc/stat`` (user nice system idle iowait irq softirq
    steal ...; guest time is already inside user, so it is not added twice)."""
    try:
        line = next(x for x in path.read_text().splitlines() if x.startswith("cpu "))
        fields = [int(v) for v in line.split()[1:]]
    except (OSError, StopIteration, ValueError):
        return None
    return CpuSnapshot(sum(fields[:8]), fields[7] if len(fields) > 7 else 0)


def procs_running(path: Path = PROC_STAT) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("procs_running "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


@dataclass(frozen=True)
class HostLoad:
    loadavg: tuple[float, float, float] | None  # 1, 5, 15 minutes
    steal_pct: float | None  # CPU steal over the measurement, % of all CPU time
    runnable: int | None  # tasks running or ready to run at the end (this measurement's included)
    cpus: int | None


def host_load(since: CpuSnapshot | None, path: Path = PROC_STAT) -> HostLoad:
    """The host's load now, with steal measured since ``since`` (a :func:`cpu_snapshot`)."""
    try:
        loadavg: tuple[float, float, float] | None = tuple(round(x, 2) for x in os.getloadavg())  # type: ignore[assignment]
    except OSError:
        loadavg = None
    now = cpu_snapshot(path)
    steal = None
    if since is not None and now is not None and now.total > since.total:
        steal = round(100.0 * (now.steal - since.steal) / (now.total - since.total), 2)
    return HostLoad(loadavg, steal, procs_running(path), os.cpu_count())
