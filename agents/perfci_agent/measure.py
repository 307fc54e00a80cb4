"""``perfci measure``: one commit on this machine -> a :class:`~perfci_core.result.ResultDocument`.

    resolve repo + commit -> fingerprint + tuning -> pick backend -> worktree + build (cached)
    -> [backend calibration] -> N repetitions in fresh pinned processes -> result

Failures that belong to the commit become results (``build_failed``, ``run_failed`` with the
reason and log tail); failures of the input (no repo, unknown commit, unusable backend) raise
:class:`~perfci_agent.errors.UsageError` / :class:`~perfci_agent.errors.BackendUnavailable`.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

from perfci_core import metrics
from perfci_core.result import BenchConfig, ResultDocument, ReusedFrom, Sample

from . import events as ev
from . import energy, fingerprint, lcores, noisy, tuning
from .backends import Backend, Choice, select
from .backends.pmu import PmuBackend
from .backends.sim import SimBackend
from .backends.sim_reuse import SimCounts, identity
from .backends.tsc import TscBackend
from .cpuinfo import read_cpuid
from .errors import BuildFailed, RunFailed, UsageError
from .hostload import cpu_snapshot
from .workspace import Workspace, repo_root, resolve_commit

CONFIGS: dict[str, BenchConfig] = {
    "self-64B": BenchConfig(),
    "self-64B-short": BenchConfig(name="self-64B-short", packets=500_000, warmup=50_000),
    "self-512B": BenchConfig(name="self-512B", pkt_size=512),
    "self-1518B": BenchConfig(name="self-1518B", pkt_size=1518),
    # 1, 2, 4, ... N lcores (N: every allotted core) per repetition: Amdahl's serial fraction from 3 or more counts
    "self-64B-scaling": BenchConfig(name="self-64B-scaling", scaling=True),
    "self-64B-short-scaling": BenchConfig(name="self-64B-short-scaling", packets=500_000, warmup=50_000, scaling=True),
}

Progress = Callable[..., None]


class Stopped(Exception):
    """``should_stop`` answered true before a repetition: the measurement is incomplete."""

    def __init__(self, done: int, total: int) -> None:
        super().__init__(f"stopped after {done} of {total} repetition(s)")
        self.done, self.total = done, total


def default_core() -> int:
    """The forwarding core when none is given: ``PERFCI_CORE`` (e.g. the host's isolated core), else
    the highest CPU this process may run on."""
    named = os.environ.get("PERFCI_CORE", "").strip()
    if not named:
        return max(os.sched_getaffinity(0))
    try:
        return int(named)
    except ValueError:
        raise UsageError(f"PERFCI_CORE must be a CPU number, got {named!r}") from None


def allowed_cores(core: int | None = None) -> list[int]:
    """The cores a command-line measurement may forward on: the forwarding core first (default:
    the highest allowed), then the other allowed cores from the highest down."""
    allowed = sorted(os.sched_getaffinity(0), reverse=True)
    first = default_core() if core is None else core
    return [first, *(c for c in allowed if c != first)]


def _now() -> datetime:
    return datetime.now(timezone.utc)


def config_named(name: str) -> BenchConfig:
    try:
        return CONFIGS[name]
    except KeyError:
        raise UsageError(f"unknown config {name!r}; known: {', '.join(CONFIGS)}") from None


def measure(
    repo: str | Path = ".",
    commit: str = "HEAD",
    backend: str = "auto",
    reps: int | None = None,
    config: str | BenchConfig = "self-64B",
    core: int | None = None,
    cache_dir: str | Path | None = None,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
    sim_family: str | None = None,
    cores: Sequence[int] | None = None,
    rebuild: bool = False,
    reuse: bool = True,
) -> ResultDocument:
    """Measure ``commit``. ``should_stop`` is asked before each repetition (a running one is
    always finished); when it answers true, :class:`Stopped` is raised. ``sim_family`` sets the
    store-buffer model of ``sim``'s hazard simulator (default: this CPU's family). ``cores``: the
    cores this measurement may forward on, ``core`` first (scaling and multi-lcore configs). ``rebuild``
    drops the cached build (or build failure) of the commit first. ``reuse``: on ``sim``, take the counts
    this machine already measured for the same binary, config and tool (:mod:`.backends.sim_reuse`;
    never with ``rebuild``). An ``ok``
    result whose repetitions spread far beyond this machine's usual noise is marked ``noisy``
    (:mod:`.noisy`)."""
    started = _now()
    host_before = cpu_snapshot()
    say = progress or (lambda *a, **k: None)
    root = repo_root(repo)
    sha = resolve_commit(root, commit)
    cfg = config if isinstance(config, BenchConfig) else config_named(config)
    if reps is not None and not 1 <= reps <= 100:
        raise UsageError(f"--reps must be between 1 and 100, got {reps}")
    core = default_core() if core is None else core
    if core not in os.sched_getaffinity(0):
        raise UsageError(f"core {core} is not available to this process (allowed: {sorted(os.sched_getaffinity(0))})")
    allotted = [core, *(c for c in (cores or []) if c != core)]
    if not set(allotted) <= os.sched_getaffinity(0):
        raise UsageError(f"cores {allotted} are not all available to this process (allowed: {sorted(os.sched_getaffinity(0))})")
    ws = Workspace(root, cache_dir)  # every path under it absolute from here on

    cpu = read_cpuid()
    fp = fingerprint.collect(core, cfg.harness, cpu)
    mid = fingerprint.machine_id(fp)
    tuned = tuning.check(core, fp)
    mapping = ev.mapping_for(cpu, bool(fp.get("smt")))
    probe_cache: list[ev.Probe] = []

    def probe() -> ev.Probe:
        if not probe_cache:
            probe_cache.append(ev.cached_probe(mapping, ws.cache_dir, mid, core=core))
        return probe_cache[0]

    choice = select(backend, probe)
    if backend == "auto" and choice.backend is metrics.Backend.SIM and cfg.scaling:
        # valgrind runs threads one at a time: no throughput it sees scales (a fixed lcore count
        # stays sim: its hazard simulator counts the line transfers between the lcores)
        choice = Choice(metrics.Backend.TSC, f"{choice.reason}; but sim does not measure scaling: the dataplane's rdtsc "
                                             "accounting (tsc) for a scaling config")
    impl: Backend
    if choice.backend.value == "pmu":
        impl = PmuBackend(probe(), mapping)
    elif choice.backend.value == "sim":
        try:
            impl = SimBackend(family=sim_family or None, tool_cache=ws.cache_dir / "tools")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        choice = Choice(choice.backend, f"{choice.reason}; store-buffer model {impl.family.reason}")
    else:
        impl = TscBackend()
    cfg = impl.config_for(cfg)
    n = reps or impl.default_reps
    say("backend", backend=choice.backend.value, reason=choice.reason)
    lcore_counts = lcores.counts_for(cfg, allotted, choice.backend)
    energy_source, unavailable = _energy_source(choice.backend)

    def doc(status: str, samples: list[Sample], reason: str | None = None, log_tail: str | None = None, build_id: str | None = None,
            reused_from: ReusedFrom | None = None) -> ResultDocument:
        return ResultDocument(
            status=status, reason=reason, log_tail=log_tail, commit=sha, build_id=build_id, config=cfg,
            backend=choice.backend, backend_reason=choice.reason, machine=fp, machine_id=mid, tuning=tuned,
            samples=samples, unavailable=unavailable, started_at=started, finished_at=_now(), reused_from=reused_from,
        )

    say("build", sha=sha)
    try:
        build = ws.build(sha, on_step=lambda step: say("build_step", step=step), rebuild=rebuild)
    except BuildFailed as exc:
        if not exc.of_commit:
            raise  # not the commit's result: the caller reports it as an error of this machine
        return doc("build_failed", [], f"build failed at {sha[:12]}: {exc}", exc.log_tail or None)
    say("built", cached=build.cached)
    build_id = build.key.build_id
    kept = SimCounts(ws.cache_dir, identity(impl, build, cfg, mid)) if isinstance(impl, SimBackend) else None
    if kept is not None and reuse and not rebuild and (hit := kept.lookup(n)) is not None:
        say("reused", commit=hit[1].commit)
        return doc("ok", hit[0], build_id=build_id, reused_from=hit[1])

    workdir = build.source
    samples: list[Sample] = []
    stop = should_stop or (lambda: False)
    try:
        if stop():
            raise Stopped(0, n)
        say("calibrate")
        impl.prepare(build.binary, core, cfg, workdir)
        runs = lcores.Runs(impl, build.binary, allotted, lcore_counts, cfg, workdir, energy_source, tool_cache=ws.cache_dir / "tools")
        for rep in range(n):
            if stop():
                raise Stopped(rep, n)
            say("run", rep=rep, reps=n)
            samples.append(runs.sample(rep))
            unavailable.update(runs.unavailable)
        samples = lcores.with_interval(samples, choice.backend)
        say("done", reps=n)
    except RunFailed as exc:
        return doc("run_failed", samples, f"run {len(samples) + 1}/{n} failed: {exc}", exc.log_tail or None, build_id)
    result = noisy.mark(doc("ok", samples, build_id=build_id), ws.cache_dir, host_before)
    if kept is not None:
        kept.record(result)
    return result


_NO_ENERGY = {
    metrics.Backend.PMU: "pmu: perf stat holds the window's control FIFOs for the core's counters; energy is read with --backend tsc",
    metrics.Backend.SIM: "sim: under valgrind the package energy is valgrind's, not the dataplane's",
}


def _energy_source(backend: metrics.Backend) -> tuple[energy.Source | None, dict[str, str]]:
    """Where the window's package energy comes from, or why there is none (``unavailable``)."""
    if backend in _NO_ENERGY:
        return None, {"energy": f"not measured with {_NO_ENERGY[backend]}"}
    try:
        return energy.probe(), {}
    except energy.EnergyUnavailable as exc:
        return None, {"energy": f"not available: {exc}"}
