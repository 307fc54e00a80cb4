"""The calibration loop of scaling measurements: the clock and a sibling's share, apart from the
dataplane's contention (docs/scaling-energy.md, "Frequency apart from contention").

``clockcal.c`` (this folder) runs, on every forwarding core at once and pinned one thread per
core, a dependent multiply chain (its TSC cycles per iteration move with the core clock only) and
eight independent chains (bound by the multiplier's throughput: they also slow when a sibling
hyperthread takes the core's units). Neither touches memory. A scaling repetition runs it right
before the dataplane at each lcore count, on that run's cores; the figures become the sample's
``lc.<n>.cal_dependent`` / ``lc.<n>.cal_throughput`` (the mean over the n cores), and
:mod:`perfci_core.analysis.scaling` divides the dataplane's busy cycles per packet by them.

The agent builds the loop once per source version (meson, like memhazard) in its tool cache,
not from the measured commit: every commit of every repository is calibrated by the same loop.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..errors import MeasureError

SOURCE = Path(__file__).resolve().parent
NAME = "perfci-clockcal"
SCHEMA = "perfci-clockcal/1"
BUILD_HINT = "a C compiler, meson and ninja (Debian: apt-get install build-essential meson ninja-build), as the dataplane needs"


class CalibrationUnavailable(MeasureError):
    """The calibration loop cannot be built or run here; the message says what is missing."""


@dataclass(frozen=True)
class CoreFigures:
    cpu: int
    dependent: float  # TSC cycles per iteration of the dependent chain (median round)
    throughput: float  # TSC cycles per iteration of the eight independent chains


@dataclass(frozen=True)
class Calibration:
    cores: tuple[CoreFigures, ...]

    @property
    def dependent(self) -> float:
        return statistics.fmean(c.dependent for c in self.cores)

    @property
    def throughput(self) -> float:
        return statistics.fmean(c.throughput for c in self.cores)

    def raw(self, lcores: int) -> dict[str, float]:
        """The sample's raw keys for the run at ``lcores`` lcores."""
        return {f"lc.{lcores}.cal_dependent": self.dependent, f"lc.{lcores}.cal_throughput": self.throughput}


def _run(cmd: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)
    except FileNotFoundError:
        raise CalibrationUnavailable(f"the calibration loop needs {cmd[0]}, which is not installed: {BUILD_HINT}") from None
    except subprocess.TimeoutExpired:
        raise CalibrationUnavailable(f"`{' '.join(cmd[:2])}` did not finish within {timeout:.0f} s") from None


def _fingerprint() -> str:
    """Hash of the loop's sources and of the compiler that builds it."""
    h = hashlib.sha256()
    for path in sorted(SOURCE.glob("*")):
        if path.suffix in (".c", ".build"):
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    h.update(_run([os.environ.get("CC", "cc"), "--version"]).stdout.encode())
    return h.hexdigest()[:16]


def binary(cache_root: Path | None = None) -> Path:
    """The loop's executable, built on first use (then reused) under ``cache_root``."""
    root = Path(cache_root) if cache_root else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "perfci"
    exe = root / f"clockcal-{_fingerprint()}" / NAME
    if exe.exists():
        return exe
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "clockcal.lock", "w") as lock:  # one builder at a time; the others reuse it
        fcntl.flock(lock, fcntl.LOCK_EX)
        if exe.exists():
            return exe
        build = root / f"{exe.parent.name}-build"
        shutil.rmtree(build, ignore_errors=True)
        for cmd in (["meson", "setup", str(build), str(SOURCE)], ["ninja", "-C", str(build)]):
            r = _run(cmd)
            if r.returncode != 0:
                raise CalibrationUnavailable(f"building the calibration loop failed at `{' '.join(cmd[:2])}`: "
                                             f"{(r.stdout + r.stderr).strip()[-2000:]}\n(needs {BUILD_HINT})")
        staging = root / f".{exe.parent.name}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        shutil.copy2(build / NAME, staging / NAME)
        staging.rename(exe.parent)
        shutil.rmtree(build, ignore_errors=True)
    return exe


def parse(text: str, cpus: Sequence[int]) -> Calibration:
    """The loop's JSON output for ``cpus``; CalibrationUnavailable when it is not that."""
    try:
        doc = json.loads(text)
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"schema {doc.get('schema')!r}, expected {SCHEMA!r}")
        cores = tuple(CoreFigures(int(c["cpu"]), float(c["dependent"]), float(c["throughput"])) for c in doc["cpus"])
        ran_on = [int(c["ran_on"]) for c in doc["cpus"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise CalibrationUnavailable(f"the calibration loop's output is unusable: {exc}") from None
    if [c.cpu for c in cores] != list(cpus) or ran_on != list(cpus):
        raise CalibrationUnavailable(f"the calibration loop ran on CPUs {ran_on}, not on {list(cpus)}")
    if not all(c.dependent > 0 and c.throughput > 0 for c in cores):
        raise CalibrationUnavailable(f"the calibration loop measured no time: {text.strip()}")
    return Calibration(cores)


def run(exe: Path, cpus: Sequence[int], iterations: int | None = None, rounds: int | None = None,
        timeout: float = 120.0) -> Calibration:
    """Run the loop on ``cpus`` at once, pinned as the dataplane is (taskset on the same CPUs, one
    thread per CPU)."""
    core_list = ",".join(map(str, cpus))
    args = [str(n) for n in (iterations, rounds) if n is not None]
    if rounds is not None and iterations is None:
        raise ValueError("rounds needs iterations")
    r = _run([shutil.which("taskset") or "taskset", "-c", core_list, str(exe), core_list, *args], timeout)
    if r.returncode != 0:
        raise CalibrationUnavailable(f"the calibration loop failed on CPUs {core_list} (exit status {r.returncode}): "
                                     f"{r.stderr.strip()[-2000:]}")
    return parse(r.stdout, cpus)
