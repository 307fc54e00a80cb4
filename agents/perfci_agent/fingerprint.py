"""The machine fingerprint: what must be equal for two measurements to be comparable (docs/design.md, "Measurement").

``machine_id`` is the sha256 of the canonical JSON (sorted keys, no whitespace) of the fingerprint.
Everything is read from /proc, /sys and two version commands; a value that cannot be read is None
(never a guess).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

from .cpuinfo import SYS_CPU, CpuId, parse_cpulist, read_cpuid, read_sys

Value = str | int | float | bool | None
PROC_MEMINFO = Path("/proc/meminfo")


def _cmd_first_line(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:
        return None
    lines = (r.stdout or r.stderr).strip().splitlines()
    return lines[0].strip() if lines else None


def smt_active(sys_cpu: Path = SYS_CPU) -> bool | None:
    active = read_sys(sys_cpu / "smt" / "active")
    if active in ("0", "1"):
        return active == "1"
    siblings = read_sys(sys_cpu / "cpu0" / "topology" / "thread_siblings_list")
    if siblings is None:
        return None
    return len(parse_cpulist(siblings)) > 1


def turbo_enabled(sys_cpu: Path = SYS_CPU) -> bool | None:
    no_turbo = read_sys(sys_cpu / "intel_pstate" / "no_turbo")
    if no_turbo in ("0", "1"):
        return no_turbo == "0"
    boost = read_sys(sys_cpu / "cpufreq" / "boost")
    if boost in ("0", "1"):
        return boost == "1"
    return None


def governor(core: int, sys_cpu: Path = SYS_CPU) -> str | None:
    return read_sys(sys_cpu / f"cpu{core}" / "cpufreq" / "scaling_governor")


def hugepages() -> dict[str, Value]:
    out: dict[str, Value] = {"hugepages_total": None, "hugepage_size_kb": None}
    try:
        text = PROC_MEMINFO.read_text()
    except OSError:
        return out
    m = re.search(r"^HugePages_Total:\s+(\d+)", text, re.M)
    if m:
        out["hugepages_total"] = int(m.group(1))
    m = re.search(r"^Hugepagesize:\s+(\d+)\s*kB", text, re.M)
    if m:
        out["hugepage_size_kb"] = int(m.group(1))
    return out


def nics() -> str | None:
    """PCI network devices bound to a driver, as "0000:01:00.0=ixgbe" (only used for real ports)."""
    root = Path("/sys/bus/pci/devices")
    found = []
    try:
        for dev in sorted(root.iterdir()):
            cls = read_sys(dev / "class") or ""
            if not cls.startswith("0x02"):
                continue
            drv = dev / "driver"
            found.append(f"{dev.name}={os.path.basename(os.readlink(drv)) if drv.exists() else 'none'}")
    except OSError:
        return None
    return ",".join(found) or None


def collect(core: int, harness: str = "self", cpu: CpuId | None = None) -> dict[str, Value]:
    """The fingerprint of this machine for a measurement on ``core``."""
    cpu = cpu or read_cpuid()
    fp: dict[str, Value] = {
        "cpu_vendor": cpu.vendor,
        "cpu_model_name": cpu.model_name or None,
        "cpu_family": cpu.family,
        "cpu_model": cpu.model,
        "cpu_stepping": cpu.stepping,
        "cpu_microcode": cpu.microcode,
        "cpu_count": os.cpu_count(),
        "hypervisor": "hypervisor" in cpu.flags,
        "smt": smt_active(),
        "turbo": turbo_enabled(),
        "governor": governor(core),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "dpdk": _cmd_first_line(["pkg-config", "--modversion", "libdpdk"]),
        "compiler": _cmd_first_line(["cc", "--version"]),
        "core": core,
        "nic": nics() if harness == "ports" else None,
    }
    fp.update(hugepages())
    return fp


def machine_id(fp: dict[str, Value]) -> str:
    canonical = json.dumps(fp, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
