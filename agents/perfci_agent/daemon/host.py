"""What this host can measure with, and whether it is in its tuned state.

Backends: ``auto`` in the configuration means every backend that works here (pmu when perf counts
instructions and cycles, sim when valgrind is installed, tsc always); explicit names are kept when
they work here. The server only hands out jobs whose backend the agent offers.

Tuned state: :func:`perfci_agent.tuning.check` (governor, turbo, SMT, isolation, nohz, hypervisor,
hugepages), plus perf access when the pmu backend may be used (``kernel.perf_event_paranoid`` and
perf installed). Deviations are recorded in every result; with ``refuse_untuned`` the agent fails
the job instead of measuring.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from perfci_core.metrics import AUTO_PREFERENCE
from perfci_core.result import Tuning

from .. import events as ev
from .. import tuning
from ..backends import valgrind_version
from ..cpuinfo import read_cpuid
from .identity import Machine


def probe_backends(machine: Machine, cache_dir: Path, core: int | None = None) -> dict[str, str | None]:
    """Backend -> None when it works here (on a hybrid CPU: on the PMU of ``core``), else why not."""
    cpu = read_cpuid()
    probe = ev.cached_probe(ev.mapping_for(cpu, bool(machine.details.get("smt"))), cache_dir, machine.machine_id, core=core)
    return {
        "pmu": None if probe.has_pmu else (probe.why_no_pmu() or "perf counts no instructions/cycles here"),
        "sim": None if valgrind_version() else "valgrind is not installed",
        "tsc": None,
    }


def usable_backends(wanted: Sequence[str], availability: dict[str, str | None]) -> tuple[list[str], list[str]]:
    """(backends to offer, best first; one line per wanted backend that cannot run here)."""
    names = AUTO_PREFERENCE if "auto" in wanted else wanted
    usable = [b for b in AUTO_PREFERENCE if b in names and availability.get(b) is None]
    problems = [f"backend {b} is configured but cannot run here: {availability[b]}"
                for b in wanted if b != "auto" and availability.get(b) is not None]
    return usable, problems


def backend_for_job(job_backend: str, configured: Sequence[str], usable: Sequence[str]) -> str:
    """What to ask ``perfci measure`` for: the job's own backend, else ``auto`` or our best one."""
    if job_backend != "auto":
        return job_backend
    return "auto" if "auto" in configured else usable[0]


def perf_access_deviations(backends: Sequence[str]) -> list[str]:
    if not any(b in ("auto", "pmu") for b in backends):
        return []
    if shutil.which("perf") is None:
        return ["perf is not installed (Debian: linux-perf): no PMU counting"]
    problem = ev.paranoid_problem(ev.read_paranoid())
    return [problem] if problem else []


def tuned_state(core: int, machine: Machine, backends: Sequence[str]) -> Tuning:
    checked = tuning.check(core, machine.details)
    deviations = [*checked.deviations, *perf_access_deviations(backends)]
    return Tuning(ok=not deviations, deviations=deviations)


def merge(recorded: Tuning, extra: Tuning) -> Tuning:
    """The result's own tuning report plus the gate's deviations it does not already name."""
    deviations = [*recorded.deviations, *(d for d in extra.deviations if d not in recorded.deviations)]
    return Tuning(ok=not deviations, deviations=deviations[:50])
