"""What this machine's CPU is, read from /proc/cpuinfo and sysfs (no subprocesses)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROC_CPUINFO = Path("/proc/cpuinfo")
SYS_CPU = Path("/sys/devices/system/cpu")


@dataclass(frozen=True)
class CpuId:
    vendor: str  # "GenuineIntel", "AuthenticAMD", "ARM" (arm64 implementer 0x41), ... or "unknown"
    family: int | None
    model: int | None
    stepping: int | None
    model_name: str
    microcode: str | None
    flags: frozenset[str]
    arm_part: int | None = None  # arm64 "CPU part"


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip(), 0)
    except ValueError:
        return None


def parse_cpuinfo(text: str) -> CpuId:
    """The first processor block of /proc/cpuinfo (x86 and arm64 layouts)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    vendor = fields.get("vendor_id") or "unknown"
    arm_part = None
    if "CPU implementer" in fields:
        vendor = "ARM" if _int(fields["CPU implementer"]) == 0x41 else f"arm64-{fields['CPU implementer']}"
        arm_part = _int(fields.get("CPU part"))
    return CpuId(
        vendor=vendor,
        family=_int(fields.get("cpu family")),
        model=_int(fields.get("model")),
        stepping=_int(fields.get("stepping")),
        model_name=fields.get("model name", ""),
        microcode=fields.get("microcode"),
        flags=frozenset(fields.get("flags", fields.get("Features", "")).split()),
        arm_part=arm_part,
    )


def read_cpuid() -> CpuId:
    try:
        return parse_cpuinfo(PROC_CPUINFO.read_text())
    except OSError:
        return CpuId("unknown", None, None, None, "", None, frozenset())


def read_sys(path: Path | str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def parse_cpulist(text: str | None) -> set[int]:
    """"0-3,8,10-11" -> {0,1,2,3,8,10,11}."""
    out: set[int] = set()
    if not text:
        return out
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            out.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            continue
    return out
