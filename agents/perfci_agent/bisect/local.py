"""``perfci bisect --local``: the search of :mod:`perfci_core.analysis.bisect`, measured here.

Each commit the search asks for is built and measured with :func:`perfci_agent.measure.measure`
(cached worktree and build per commit); every result document is kept in the local
:class:`~.cache.ResultCache`, and results cached by earlier runs are used before anything is
measured. A commit that does not build (or whose dataplane fails) is skipped. Once the culprit is
confirmed, :mod:`.profile` says which functions' costs moved between its parent and it.

On ``sim``, every commit is measured with one store-buffer model (``sim_family``: the one asked
for, else this CPU's), only cached results of that model are reused, and the report names it: a
hazard that one model sees and another does not must not look like a change between commits.

On a noisy backend (pmu, tsc), a step that measures two commits (the endpoints, a confirmation, more
repetitions of an undecided pair) runs them interleaved (:mod:`perfci_agent.interleave`), so the
two commits it compares saw the same host states, and the search decides on their pairs (at least
the pairs the paired test needs to reach its look's share of the policy's alpha: 11 at 0.01); a step that wants one
commit measures it alone.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from perfci_core import metrics as catalogue
from perfci_core.analysis import bisect as core
from perfci_core.analysis.bisect import DIRECTIONS
from perfci_core.result import ResultDocument

from .. import events, fingerprint
from ..cpuinfo import read_cpuid
from ..errors import UsageError
from ..hazards import DEFAULT_COMMIT_RULE, family_for, recorded_family
from ..hazards.family import recorded_commit_rule
from ..interleave import interleave
from ..measure import config_named, default_core, measure
from ..workspace import Workspace, cache_root, repo_root
from .cache import ResultCache
from .commits import CommitInfo, commit_range
from .exit import exit_status
from .profile import Profile, callgrind_profile, hazard_profile, perf_profile

log = logging.getLogger(__name__)
Progress = Callable[..., None]
NOISY_BACKENDS = ("pmu", "tsc")  # sim counts are exact: nothing for interleaving to cancel


@dataclass
class CommitRecord:
    index: int
    info: CommitInfo
    values: list[float] = field(default_factory=list)
    fresh: list[float] = field(default_factory=list)  # confirmation repetitions
    status: str = "untested"  # untested | measured | cached | build_failed | run_failed
    reason: str = ""

    def to_dict(self) -> dict:
        return {"index": self.index, **self.info.to_dict(), "status": self.status, "reason": self.reason,
                "values": self.values, "confirm_values": self.fresh}


@dataclass
class BisectReport:
    """Everything ``perfci bisect`` prints; :meth:`to_dict` is the ``--json`` document."""

    status: str
    message: str
    metric: str
    backend: str
    config: str
    commits: list[CommitRecord]
    outcome: core.Outcome
    builds: int  # commits measured by this run (each needs its build; failed builds included)
    compiled: int  # of those, how many were compiled now rather than taken from the build cache
    repetitions: int  # measurements run now (cached ones not counted)
    reused: int  # repetitions taken from earlier results: cached documents, sim counts kept for the same binary
    steps: list[dict]
    profiles: list[Profile] = field(default_factory=list)
    sim_family: str | None = None  # the store-buffer model every sim measurement used

    @property
    def exit_code(self) -> int:
        return exit_status(self.to_dict())

    @property
    def log2_bound(self) -> int:
        return math.ceil(math.log2(len(self.commits)))

    def commit(self, index: int | None) -> CommitRecord | None:
        return self.commits[index] if index is not None else None

    def _ref(self, index: int | None) -> dict | None:
        return None if index is None else self.commits[index].info.to_dict() | {"index": index}

    def _move(self, m: dict) -> dict:
        """An opposing move of the outcome with its commits named (indices become commit refs)."""
        refs = {k: self._ref(m.get(k)) for k in ("good", "bad", "parent", "culprit")}
        return {**m, **refs, "skipped": [self.commits[i].info.sha for i in m.get("skipped", [])]}

    def to_dict(self) -> dict:
        o = self.outcome
        culprit, parent = self.commit(o.culprit), self.commit(o.parent)
        return {
            "status": self.status,
            "message": self.message,
            "metric": self.metric,
            "backend": self.backend,
            "config": self.config,
            "sim_family": self.sim_family if self.backend == catalogue.Backend.SIM.value else None,
            "good": self.commits[0].info.sha,
            "bad": self.commits[-1].info.sha,
            "range_length": len(self.commits),
            "culprit": culprit.info.to_dict() | {"index": culprit.index} if culprit else None,
            "parent": parent.info.to_dict() | {"index": parent.index} if parent else None,
            "skipped": [self.commits[i].info.sha for i in o.skipped],
            "kind": o.kind.value,
            "change": core.comparison_dict(o.step),
            "overall": core.comparison_dict(o.overall),
            "builds": self.builds,
            "compiled": self.compiled,
            "repetitions": self.repetitions,
            "reused_repetitions": self.reused,
            "log2_range": self.log2_bound,
            "steps": self.steps,
            "notes": list(o.notes),
            "direction": o.direction,
            "opposing": [self._move(m) for m in o.opposing],
            "profiles": [p.to_dict() for p in self.profiles],
            "commits": [c.to_dict() for c in self.commits if c.status != "untested"],
        }


def metric_values(doc: ResultDocument, metric: str) -> list[float]:
    return [m.value for s in doc.samples for m in s.metrics if m.metric == metric and m.backend == doc.backend]


class LocalBisect:
    def __init__(self, repo: str | Path, good: str, bad: str, metric: str, config: str = "self-64B",
                 backend: str = "auto", core: int | None = None, cache_dir: str | Path | None = None,
                 policy_overrides: dict | None = None, progress: Progress | None = None, direction: str = "any",
                 sim_family: str | None = None) -> None:
        try:
            self.metric = catalogue.get(metric)
        except KeyError as exc:
            raise UsageError(str(exc.args[0])) from None
        if backend not in ("auto", *(b.value for b in catalogue.Backend)):
            raise UsageError(f"unknown backend {backend!r}; use auto, pmu, sim or tsc")
        if backend != "auto" and catalogue.Backend(backend) not in self.metric.backends:
            raise UsageError(f"backend {backend} does not measure {metric}; it is measured by "
                             f"{', '.join(sorted(b.value for b in self.metric.backends))}")
        config_named(config)
        if sim_family and backend not in ("auto", catalogue.Backend.SIM.value):
            raise UsageError(f"--sim-family sets the sim backend's model; this bisect runs on {backend}")
        try:
            self.sim_family = family_for(read_cpuid(), sim_family or None).name
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        self.root = repo_root(repo)
        self.commits = [CommitRecord(i, c) for i, c in enumerate(commit_range(self.root, good, bad))]
        self.config, self.backend, self.core = config, backend, core
        self.cache_dir = cache_root(self.root, cache_dir)
        self.cache = ResultCache(self.cache_dir)
        if direction not in DIRECTIONS:
            raise UsageError(f"unknown direction {direction!r}; use {', '.join(DIRECTIONS)}")
        self.direction = direction
        self.overrides = policy_overrides or {}
        self.say = progress or (lambda *a, **k: None)
        self.builds: set[int] = set()
        self.compiled = 0
        self.repetitions = 0
        self.reused = 0
        self.stored: set[Path] = set()  # documents this run added to the cache
        self.machine_id: str | None = None
        self.backend_reason = ""
        self._step: core.Measure | None = None  # the step being measured (its commits are interleaved)
        self._pending: dict[tuple[int, bool], tuple[ResultDocument, int]] = {}  # the other side of a session
        self.interleavings: list[dict] = []  # seed and order of every interleaved measurement
        self._min_pairs = 0  # the run's policy's Policy.pairs_needed(), once the run knows it

    # --- measuring ---------------------------------------------------------------------------

    def _measure(self, index: int, reps: int) -> ResultDocument:
        """The commit built as it builds today and measured. A confirmation thus checks the search's
        results (possibly cached by an earlier run, from another build) against this binary; on sim,
        the counts kept for this very binary (:mod:`..backends.sim_reuse`) are that check at no cost,
        because sim's counts are deterministic."""
        rec = self.commits[index]
        self.builds.add(index)
        compiled: list[bool] = []

        def relay(event: str, **kw: object) -> None:
            if event == "built":
                compiled.append(not kw["cached"])
            self.say("measure_" + event, **{"index": index, "sha": rec.info.sha, **kw})

        doc = measure(self.root, rec.info.sha, backend=self.backend, reps=reps, config=self.config, core=self.core,
                      cache_dir=self.cache_dir, progress=relay, sim_family=self.sim_family)
        self.compiled += sum(compiled)
        if self.backend == "auto":  # the first result says what auto chose; keep it for every commit
            self.backend = doc.backend.value
        self.machine_id, self.backend_reason = doc.machine_id, doc.backend_reason
        stored = self.cache.store(self.config, doc)
        if stored:
            self.stored.add(stored)
        return doc

    def _on_step(self, step: core.Measure) -> None:
        self._step = step
        self.say("step", why=step.why, wants=step.wants, fresh=step.fresh)

    def _interleaved(self, index: int, fresh: bool) -> tuple[ResultDocument, int] | None:
        """On a noisy backend, a step that wants two commits measures them interleaved in one
        go (:mod:`..interleave`: both builds first, A B A B ... in a seeded random order), so the
        two commits it compares saw the same host states and the search decides on their pairs.
        It takes at least the pairs the paired test needs to reach the policy's alpha. The other
        commit's document waits in ``self._pending`` for the search to ask for it. Returns the
        document and the session's key (1, 2, ...), or None: measure ``index`` alone."""
        pending = self._pending.pop((index, fresh), None)
        if pending is not None:
            return pending
        step = self._step
        if self.backend not in NOISY_BACKENDS or step is None or step.fresh != fresh or len(step.wants) != 2:
            return None
        (i, want_i), (j, want_j) = step.wants
        if index not in (i, j):
            return None
        have = {k: len(self.commits[k].fresh if fresh else self.commits[k].values) for k in (i, j)}
        pairs = max(want_i - have[i], want_j - have[j], self._min_pairs)
        sides = {"base": i, "head": j}
        self.say("interleave", indices=(i, j), pairs=pairs, fresh=fresh)
        done = interleave(self.root, self.commits[i].info.sha, self.commits[j].info.sha, pairs, backend=self.backend,
                          config=self.config, core=self.core, cache_dir=self.cache_dir, sim_family=self.sim_family,
                          progress=lambda event, **kw: self.say("interleave_" + event, **kw))
        if not done.ok:
            return None  # a commit that does not build or run: measured alone, as any other
        self.interleavings.append({"indices": [i, j], "fresh": fresh, **done.to_dict()})
        session = len(self.interleavings)
        for side, doc in (("base", done.base), ("head", done.head)):
            k = sides[side]
            self.builds.add(k)
            self.machine_id, self.backend_reason = doc.machine_id, doc.backend_reason
            stored = self.cache.store(self.config, doc)
            if stored:
                self.stored.add(stored)
            if k != index:
                self._pending[(k, fresh)] = (doc, session)
        return (done.base if index == i else done.head), session

    def _sample(self, index: int, count: int, fresh: bool) -> list[float] | core.Sampled | None:
        rec = self.commits[index]
        self.say("sample", index=index, sha=rec.info.sha, count=count, fresh=fresh)
        doc, session = self._interleaved(index, fresh) or (self._measure(index, count), 0)
        if doc.status != "ok":
            rec.status, rec.reason = doc.status, doc.reason or doc.status
            log.info("commit %s skipped: %s", rec.info.sha[:12], rec.reason)
            return None
        values = metric_values(doc, self.metric.name)
        if not values:
            raise UsageError(f"backend {doc.backend.value} produced no {self.metric.name} values")
        if doc.reused_from is not None:
            self.reused += len(values)  # sim counts kept for this binary: taken, not simulated
        else:
            self.repetitions += len(values)
        (rec.fresh if fresh else rec.values).extend(values)
        rec.status = "measured"
        return core.Sampled(values, session) if session else values

    def _seed(self, bisection: core.Bisection) -> None:
        """Record what earlier runs measured on this machine x config x backend."""
        if self.machine_id is None:
            return
        for rec in self.commits:
            docs = [d for path, d in self.cache.load(self.machine_id, self.config, self.backend, rec.info.sha)
                    if path not in self.stored and self._same_model(d)]
            if any(d.status == "build_failed" for d in docs):
                bisection.record(rec.index, unbuildable=True)
                rec.status, rec.reason = "build_failed", next(d.reason or "" for d in docs if d.status == "build_failed")
                continue
            values = [v for d in docs if d.status == "ok" for v in metric_values(d, self.metric.name)]
            if values:
                bisection.record(rec.index, values)
                rec.values.extend(values)
                rec.status = "cached"
                self.reused += len(values)

    def _same_model(self, doc: ResultDocument) -> bool:
        """A cached result measured as this run measures: on sim, with the same store-buffer model and
        store-commit rule (results from before the rule was recorded used ``rob``)."""
        if doc.backend is not catalogue.Backend.SIM or doc.status != "ok":
            return True
        return all(recorded_family(s.raw) == self.sim_family and recorded_commit_rule(s.raw) == DEFAULT_COMMIT_RULE
                   for s in doc.samples)  # measure() runs sim with the default store-commit rule

    # --- the run -------------------------------------------------------------------------------

    def run(self) -> BisectReport:
        n = len(self.commits)
        self.say("start", n=n, bound=math.ceil(math.log2(n)) + 2)
        first: list[float] | None = None
        if self.backend == "auto":  # one repetition of good resolves the backend (and the machine)
            first = self._sample(0, 1, False)
            if first is None:
                rec = self.commits[0]
                return self._report(core.Outcome("inconclusive", f"the good commit does not build or run: {rec.reason}",
                                                 direction=self.direction), [])
        else:  # the cache is per machine fingerprint
            core_id = default_core() if self.core is None else self.core
            self.machine_id = fingerprint.machine_id(fingerprint.collect(core_id, config_named(self.config).harness, read_cpuid()))
        policy = core.Policy.for_backend(self.backend, self.metric.name, **{"direction": self.direction, **self.overrides})
        bisection = core.Bisection(n, policy)
        self._min_pairs = policy.pairs_needed()  # at the share of alpha its look spends
        if first is not None:
            bisection.record(0, first)
        self._seed(bisection)
        outcome = core.run(bisection, self._sample, on_step=self._on_step)
        profiles = self._profiles(outcome) if outcome.culprit is not None and outcome.status in ("culprit", "ambiguous") else []
        return self._report(outcome, bisection.state.steps, profiles)

    def _profiles(self, outcome: core.Outcome) -> list[Profile]:
        self.say("profile")
        ws = Workspace(self.root, self.cache_dir)
        parent = ws.build(self.commits[outcome.parent].info.sha)
        culprit = ws.build(self.commits[outcome.culprit].info.sha)
        cfg = config_named(self.config)
        core_id = default_core() if self.core is None else self.core
        dirs = (parent.source, culprit.source)
        pmu, why_not = self._pmu(core_id, cfg.harness)
        return [callgrind_profile(parent.binary, culprit.binary, cfg, core_id, dirs),
                hazard_profile(parent.binary, culprit.binary, cfg, core_id, dirs, self.sim_family),
                perf_profile(parent.binary, culprit.binary, cfg, core_id, dirs, pmu, why_not)]

    def _pmu(self, core_id: int, harness: str) -> tuple[bool, str]:
        """Whether perf can count hardware events here (the measure pipeline's cached probe)."""
        if self.backend == catalogue.Backend.PMU.value:
            return True, ""
        cpu = read_cpuid()
        fp = fingerprint.collect(core_id, harness, cpu)
        probe = events.cached_probe(events.mapping_for(cpu, bool(fp.get("smt"))), self.cache_dir, fingerprint.machine_id(fp), core=core_id)
        return probe.has_pmu, "" if probe.has_pmu else probe.why_no_pmu()

    def _report(self, outcome: core.Outcome, steps: list[dict], profiles: list[Profile] | None = None) -> BisectReport:
        return BisectReport(outcome.status, self._message(outcome), self.metric.name, self.backend, self.config,
                            self.commits, outcome, len(self.builds), self.compiled, self.repetitions,
                            self.reused, steps, profiles or [], self.sim_family)

    def _message(self, o: core.Outcome) -> str:
        if o.culprit is None:
            return o.message
        c = self.commits[o.culprit].info
        text = f"{c.sha[:12]} {c.subject!r}: {o.message.split(': ', 1)[-1]}"
        if o.skipped:
            text += " (or one of the unbuildable " + ", ".join(self.commits[i].info.sha[:12] for i in o.skipped) + ")"
        if o.status == "unconfirmed":
            text = f"not confirmed — {o.message}"
        return text
