"""Which store-buffer model fits this CPU (``memhazard --family``).

The tool knows four families (rules and sizes with their sources in ``tool/mh_main.c``). A CPU
that is none of them gets :data:`DEFAULT_FAMILY`, and the result says so in its raw keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..cpuinfo import CpuId

FAMILIES = ("intel-icx", "intel-spr", "intel-skx", "amd-zen4")
DEFAULT_FAMILY = "intel-icx"

# Intel family 6 model numbers (Intel SDM vol. 4, "CPUID Signature Values") of the server cores.
_INTEL_MODELS = {
    0x55: "intel-skx",  # Skylake-SP, Cascade Lake, Cooper Lake
    0x6A: "intel-icx", 0x6C: "intel-icx",  # Ice Lake-SP, Ice Lake-D
    0x8F: "intel-spr", 0xCF: "intel-spr",  # Sapphire Rapids, Emerald Rapids (Raptor Cove)
}
# AMD family 19h model ranges of Zen 4 (Genoa, Bergamo, Raphael, Phoenix, Siena).
_ZEN4_MODELS = (range(0x10, 0x20), range(0x60, 0x80), range(0xA0, 0xB0))


@dataclass(frozen=True)
class FamilyChoice:
    name: str
    default: bool  # the CPU is not one the tool models: the default model stands in
    reason: str


def family_for(cpu: CpuId, requested: str | None = None) -> FamilyChoice:
    """The family a config asks for, else the one of this CPU, else the default."""
    if requested:
        if requested not in FAMILIES:
            raise ValueError(f"unknown store-buffer family {requested!r}; known: {', '.join(FAMILIES)}")
        return FamilyChoice(requested, False, f"{requested} (set in the config)")
    name = None
    if cpu.vendor == "GenuineIntel" and cpu.family == 6:
        name = _INTEL_MODELS.get(cpu.model or -1)
    elif cpu.vendor == "AuthenticAMD" and cpu.family == 0x19 and any((cpu.model or -1) in r for r in _ZEN4_MODELS):
        name = "amd-zen4"
    what = f"{cpu.vendor} family {cpu.family} model {cpu.model}"
    if name is None:
        return FamilyChoice(DEFAULT_FAMILY, True, f"{what} is not a modelled family: the default model {DEFAULT_FAMILY}")
    return FamilyChoice(name, False, f"{what}: {name}")


RECORDED_PREFIX = "sim.hz_family."  # the raw key a sim sample records its model under (value 1)


def recorded_family(raw: Mapping[str, float | None]) -> str | None:
    """The store-buffer model a sim sample was measured with, from its raw keys (None: not recorded)."""
    return next((k.removeprefix(RECORDED_PREFIX) for k in raw if k.startswith(RECORDED_PREFIX)), None)


RECORDED_RULE_PREFIX = "sim.hz_commit_rule."  # the raw key of the store-commit rule (value 1)
RULE_BEFORE_RECORDING = "rob"  # samples measured before the rule was recorded used the only rule there was


def recorded_commit_rule(raw: Mapping[str, float | None]) -> str:
    """The store-commit rule (``time`` or ``rob``) a sim sample was measured with, from its raw keys."""
    return next((k.removeprefix(RECORDED_RULE_PREFIX) for k in raw if k.startswith(RECORDED_RULE_PREFIX)), RULE_BEFORE_RECORDING)
