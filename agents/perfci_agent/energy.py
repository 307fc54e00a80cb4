"""Package energy (RAPL) over the dataplane's measurement window, where this machine exposes it.

Two sources, tried in this order (docs/design.md, "Memory hazards, scaling and energy"):

1. perf's ``power/energy-pkg/`` and ``power/energy-ram/`` events (package-wide: ``perf stat -a``;
   root or ``perf_event_paranoid`` <= 0). The run is wrapped like the pmu backend's:
   ``perf stat -a -x, -e power/energy-pkg/,power/energy-ram/ -D -1 --control fd:CTL,ACK --``,
   so only the window between the dataplane's ``enable`` and ``disable`` is counted.
2. the powercap files ``/sys/class/powercap/intel-rapl:<p>/energy_uj`` (a decimal µJ counter
   that wraps at ``max_energy_range_uj``; a subzone named ``dram`` for memory; root only on
   current kernels). Here the agent itself answers the dataplane's ``enable``/``disable`` on the
   control FIFOs (as perf would) and reads the counters at those two moments.

Package energy includes every core's work, not only the forwarding lcores': each reading also
records what else ran over the window — the busy CPU-equivalents of the *other* CPUs
(``/proc/stat``) and the 1-minute load average — and the explanation says so.

Where neither source is readable (VMs: no ``power`` PMU, no powercap), :func:`probe` returns the
reason and the result carries it under ``unavailable["energy"]``: never a number.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from . import perfstat, runner

POWERCAP = Path("/sys/class/powercap")
POWER_EVENTS = Path("/sys/bus/event_source/devices/power/events")
PARANOID = Path("/proc/sys/kernel/perf_event_paranoid")
PROC_STAT = Path("/proc/stat")
LOADAVG = Path("/proc/loadavg")
PERF_EVENTS = ("power/energy-pkg/", "power/energy-ram/")
ACK = b"ack\n\0"  # what perf answers on the ack FIFO (the dataplane checks the first 4 bytes)


class EnergyUnavailable(Exception):
    """RAPL cannot be read here; the message says why."""


@dataclass(frozen=True)
class Energy:
    pkg_joules: float
    ram_joules: float | None
    seconds: float
    other_cpus_busy: float | None = None  # CPU-equivalents busy on CPUs other than the lcores
    loadavg1: float | None = None

    def raw(self, prefix: str) -> dict[str, float | None]:
        return {f"{prefix}.pkg_joules": self.pkg_joules, f"{prefix}.ram_joules": self.ram_joules,
                f"{prefix}.energy_seconds": self.seconds, f"{prefix}.other_cpus_busy": self.other_cpus_busy,
                f"{prefix}.loadavg1": self.loadavg1}


# --- perf -------------------------------------------------------------------------------------


def _joules(counts: list[perfstat.Count], event: str) -> float | None:
    """The event's joules: interval output (``-I``) prints per-interval amounts, summed here."""
    mine = [c for c in counts if c.event == event]
    if not mine or any(c.value is None for c in mine):
        return None
    for c in mine:
        if c.unit != "Joules":
            raise EnergyUnavailable(f"perf reported {event} in {c.unit!r}, expected Joules")
    return sum(c.value for c in mine if c.value is not None)


def parse_perf(text: str) -> tuple[float, float | None]:
    """(package, DRAM) joules from ``perf stat -a -x, -e power/energy-pkg/,power/energy-ram/``
    output; DRAM is None when the CPU has no such domain (absent or ``<not supported>``).
    perf's runtime column is not the window's length: with ``-a`` it is summed over the one CPU
    per package that reads the counter (2 s per second on a two-socket host)."""
    counts = perfstat.parse_csv(text)
    pkg = _joules(counts, "power/energy-pkg/")
    if pkg is None:
        status = next((c.status for c in counts if c.event == "power/energy-pkg/"), None)
        raise EnergyUnavailable(f"perf reported power/energy-pkg/ as {status}" if status else "perf printed no power/energy-pkg/ count")
    return pkg, _joules(counts, "power/energy-ram/")


def perf_wrapper(perf: str, out: Path, ctl: int, ack: int) -> list[str]:
    return [perf, "stat", "-a", "-x,", "-o", str(out), "-e", ",".join(PERF_EVENTS), "-D", "-1", "--control", f"fd:{ctl},{ack}", "--"]


# --- powercap sysfs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Zone:
    path: Path
    name: str  # "package-0", "dram", ...
    max_range_uj: int


_TOP_ZONE = re.compile(r"^intel-rapl:\d+$")
_SUB_ZONE = re.compile(r"^intel-rapl:\d+:\d+$")


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().strip())
    except FileNotFoundError:
        raise EnergyUnavailable(f"{path} does not exist") from None
    except PermissionError:
        raise EnergyUnavailable(f"{path} is not readable by this user (root only on current kernels)") from None
    except (OSError, ValueError) as exc:
        raise EnergyUnavailable(f"{path}: {exc}") from None


def zones(root: Path = POWERCAP) -> list[Zone]:
    """Package zones and their ``dram`` subzones; EnergyUnavailable when there are none."""
    try:
        entries = sorted(root.iterdir())
    except FileNotFoundError:
        raise EnergyUnavailable(f"{root} does not exist (no powercap driver)") from None
    except OSError as exc:
        raise EnergyUnavailable(f"{root} cannot be listed: {exc.strerror}") from None
    out = []
    for d in entries:
        if not (_TOP_ZONE.match(d.name) or _SUB_ZONE.match(d.name)):
            continue
        try:
            name = (d / "name").read_text().strip()
        except OSError:
            continue
        if _TOP_ZONE.match(d.name) or name == "dram":
            out.append(Zone(d, name, _read_int(d / "max_energy_range_uj")))
    if not any(z.name.startswith("package") for z in out):
        raise EnergyUnavailable(f"{root} has no intel-rapl package zone")
    return out


def read_uj(zones_: Sequence[Zone]) -> dict[Path, int]:
    return {z.path: _read_int(z.path / "energy_uj") for z in zones_}


def delta_uj(before: int, after: int, max_range_uj: int) -> int:
    """Energy between two readings of one counter; it wraps to 0 after ``max_range_uj``."""
    return after - before if after >= before else after + max_range_uj - before


def sysfs_joules(zones_: Sequence[Zone], before: dict[Path, int], after: dict[Path, int]) -> tuple[float, float | None]:
    pkg = sum(delta_uj(before[z.path], after[z.path], z.max_range_uj) for z in zones_ if z.name.startswith("package"))
    drams = [delta_uj(before[z.path], after[z.path], z.max_range_uj) for z in zones_ if z.name == "dram"]
    return pkg / 1e6, (sum(drams) / 1e6 if drams else None)


# --- what else ran ----------------------------------------------------------------------------


def cpu_times(stat: Path = PROC_STAT) -> dict[int, tuple[int, int]]:
    """(busy, total) jiffies per CPU from /proc/stat (busy = total - idle - iowait)."""
    out = {}
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return {}
    for line in lines:
        f = line.split()
        if f and f[0].startswith("cpu") and f[0] != "cpu":
            ticks = [int(x) for x in f[1:]]
            idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
            out[int(f[0][3:])] = (sum(ticks[:8]) - idle, sum(ticks[:8]))
    return out


def other_cpus_busy(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]], lcores: Sequence[int]) -> float | None:
    """Busy CPU-equivalents of the CPUs that are not forwarding lcores, between two readings."""
    others = [c for c in after if c in before and c not in set(lcores)]
    if not others:
        return None if not after else 0.0
    total = max(after[c][1] - before[c][1] for c in others)
    if total <= 0:
        return None  # a window shorter than one jiffy
    return sum(after[c][0] - before[c][0] for c in others) / total


def loadavg1(path: Path = LOADAVG) -> float | None:
    try:
        return float(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


# --- choosing a source ------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    kind: str  # "perf" | "sysfs"
    perf: str | None = None
    zones: tuple[Zone, ...] = ()


def probe(perf: str | None = None, powercap: Path = POWERCAP, events: Path = POWER_EVENTS, paranoid: Path = PARANOID,
          euid: int | None = None) -> Source:
    """The first usable source; EnergyUnavailable with both reasons when there is none."""
    perf = perf if perf is not None else shutil.which("perf")
    euid = os.geteuid() if euid is None else euid
    if perf is None:
        perf_why = "perf is not installed"
    elif not (events / "energy-pkg").exists():
        perf_why = f"perf has no power/energy-pkg/ event ({events} absent: no RAPL PMU)"
    else:
        level = _read_int(paranoid) if paranoid.exists() else 2
        perf_why = "" if euid == 0 or level <= 0 else f"perf_event_paranoid is {level} (system-wide power events need <= 0 or root)"
    if not perf_why:
        return Source("perf", perf=perf)
    try:
        zs = zones(powercap)
        read_uj(zs)
        return Source("sysfs", zones=tuple(zs))
    except EnergyUnavailable as exc:
        raise EnergyUnavailable(f"RAPL not readable: {perf_why}; {exc}") from None


# --- the window, read by the agent on the dataplane's control FIFOs --------------------------


@dataclass
class WindowReader:
    """Answers the dataplane's ``enable``/``disable`` like perf does and reads the powercap
    counters, /proc/stat and the load average at those two moments."""

    zones: Sequence[Zone]
    lcores: Sequence[int]
    ctl: int = -1
    ack: int = -1
    readings: list[tuple[float, dict[Path, int], dict[int, tuple[int, int]]]] = field(default_factory=list)
    error: str | None = None

    def serve(self, stop: threading.Event) -> None:
        buf = b""
        while not stop.is_set():
            ready, _, _ = select.select([self.ctl], [], [], 0.05)
            if not ready:
                continue
            buf += os.read(self.ctl, 64)
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip() in (b"enable", b"disable"):
                    try:
                        self.readings.append((time.monotonic(), read_uj(self.zones), cpu_times()))
                    except EnergyUnavailable as exc:
                        self.error = str(exc)
                    os.write(self.ack, ACK)

    def energy(self) -> Energy:
        if self.error:
            raise EnergyUnavailable(self.error)
        if len(self.readings) != 2:
            raise EnergyUnavailable(f"the dataplane opened and closed its window {len(self.readings)} time(s), expected once each")
        (t0, e0, c0), (t1, e1, c1) = self.readings
        pkg, ram = sysfs_joules(self.zones, e0, e1)
        return Energy(pkg, ram, t1 - t0, other_cpus_busy(c0, c1, self.lcores), loadavg1())


@contextmanager
def control_fifos() -> Iterator[tuple[int, int, Path]]:
    """Two FIFOs opened read-write (neither open blocks), as the pmu backend makes them."""
    with tempfile.TemporaryDirectory(prefix="perfci-energy-") as tmp:
        ctl_path, ack_path = Path(tmp) / "ctl", Path(tmp) / "ack"
        os.mkfifo(ctl_path)
        os.mkfifo(ack_path)
        ctl, ack = os.open(ctl_path, os.O_RDWR), os.open(ack_path, os.O_RDWR)
        try:
            yield ctl, ack, Path(tmp)
        finally:
            os.close(ctl)
            os.close(ack)


@contextmanager
def sysfs_window(zones_: Sequence[Zone], lcores: Sequence[int]) -> Iterator[WindowReader]:
    """A reader serving the control FIFOs for the duration of one run (pass its ``ctl``/``ack``
    to the dataplane's --perf-ctl/--perf-ack)."""
    with control_fifos() as (ctl, ack, _):
        reader = WindowReader(zones_, lcores, ctl, ack)
        stop = threading.Event()
        thread = threading.Thread(target=reader.serve, args=(stop,), name="perfci-energy", daemon=True)
        thread.start()
        try:
            yield reader
        finally:
            stop.set()
            thread.join()


# --- one run, with its window's energy --------------------------------------------------------


def run_measured(source: Source, spec: runner.RunSpec, lcores: Sequence[int]) -> tuple[runner.RunResult, Energy | EnergyUnavailable]:
    """Run ``spec`` once with the window's package energy read from ``source``. A run that
    fails is RunFailed as always; energy that could not be read comes back as the
    EnergyUnavailable saying why, with the run's result (the run itself is good)."""
    if source.kind == "sysfs":
        with sysfs_window(source.zones, lcores) as reader:
            spec.perf_fds = (reader.ctl, reader.ack)
            result = runner.run(spec)
        try:
            return result, reader.energy()
        except EnergyUnavailable as exc:
            return result, exc
    with control_fifos() as (ctl, ack, tmp):
        out = tmp / "energy.csv"
        spec.wrapper = perf_wrapper(source.perf or "perf", out, ctl, ack)
        spec.perf_fds = (ctl, ack)
        before = cpu_times()  # perf owns the window here: other CPUs are read over the whole run
        result = runner.run(spec)
        after = cpu_times()
        text = out.read_text() if out.exists() else ""
    try:
        pkg, ram = parse_perf(text)
    except EnergyUnavailable as exc:
        return result, exc
    return result, Energy(pkg, ram, window_seconds(result.report), other_cpus_busy(before, after, lcores), loadavg1())


def window_seconds(report: dict) -> float:
    """The dataplane's window (wall-clock, shared by every lcore) in seconds: what perf counted."""
    return float(report["window"]["cycles"]["window"]) / float(report["tsc_hz"])
