"""Two commits measured interleaved in one run: A B A B ..., the order inside each pair random.

Why: the repetitions of one job share the host's state at that moment, so a block of base runs
followed by a block of head runs compares two moments of the host as much as two commits. Here
both commits are built first (the workspace's build cache), then each pair runs the two builds
next to each other, in an order drawn from a seeded generator; the seed is recorded so the order
can be replayed, and it makes drift inside a pair as likely to favour one side as the other,
which is what the paired test (:mod:`perfci_core.analysis.paired`) assumes.

Every repetition is one :func:`perfci_agent.measure.measure` call with one repetition — the same
code path as any measurement (backend choice, tuning check, calibration, fresh pinned process) —
and the two sides' repetitions are gathered into one result document per commit. On ``sim`` a run takes
the counts this machine already simulated for the same binary and config
(:mod:`perfci_agent.backends.sim_reuse`): they are exact, so simulating them again would only repeat
them; a side whose every run was reused says so (``reused_from``).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from perfci_core.result import BenchConfig, ResultDocument

from . import noisy
from .errors import BuildFailed
from .hostload import cpu_snapshot
from .measure import Stopped, measure
from .workspace import Workspace, repo_root, resolve_commit

Progress = Callable[..., None]
SIDES = ("base", "head")


def pair_order(seed: int, n: int) -> list[str]:
    """Which side runs first in each of the first ``n`` pairs; a prefix of the same sequence for
    any larger ``n``, so pairs added later continue the order the seed started."""
    rng = np.random.default_rng(seed)
    return [SIDES[int(x)] for x in rng.integers(0, 2, size=n)]


@dataclass
class Interleaved:
    """Both sides' repetitions of an interleaved run. ``base.samples[i]`` and ``head.samples[i]``
    are pair ``i`` (sample ``rep`` = pair index); ``first[i]`` says which of them ran first."""

    base: ResultDocument
    head: ResultDocument
    seed: int
    first: list[str] = field(default_factory=list)
    run_order: list[tuple[int, str]] = field(default_factory=list)  # (pair, side) as the runs happened

    @property
    def ok(self) -> bool:
        return self.base.status == "ok" and self.head.status == "ok"

    @property
    def pairs(self) -> int:
        return len(self.first)

    def values(self, metric: str) -> tuple[list[float], list[float]]:
        """Per pair, the metric on each side (pairs missing the metric on either side are left out)."""
        def by_rep(doc: ResultDocument) -> dict[int, float]:
            return {s.rep: m.value for s in doc.samples for m in s.metrics if m.metric == metric and m.backend == doc.backend}

        a, b = by_rep(self.base), by_rep(self.head)
        reps = sorted(a.keys() & b.keys())
        return [a[r] for r in reps], [b[r] for r in reps]

    def to_dict(self) -> dict:
        return {"seed": self.seed, "pairs": self.pairs, "first": self.first,
                "run_order": [[p, s] for p, s in self.run_order]}


def interleave(
    repo: str | Path,
    base: str,
    head: str,
    pairs: int,
    *,
    seed: int | None = None,
    start_pair: int = 0,
    backend: str = "auto",
    config: str | BenchConfig = "self-64B",
    core: int | None = None,
    cache_dir: str | Path | None = None,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
    sim_family: str | None = None,
    cores: Sequence[int] | None = None,
    reuse: bool = True,
) -> Interleaved:
    """Measure ``pairs`` pairs of ``base`` and ``head``; pairs are numbered from ``start_pair``
    (to add pairs to an earlier run with the same seed, which then continues its order).

    A side that does not build gives a ``build_failed`` document and no runs at all; a run that
    fails ends the measurement with that side ``run_failed`` and only the complete pairs kept.
    ``seed`` None draws one (recorded in the result). ``sim_family`` and ``cores`` reach every
    :func:`measure` call as they are (the agent daemon measures a pair exactly like one job), and so does
    ``reuse`` (``sim``'s kept counts; ``pmu`` and ``tsc`` always measure)."""
    say = progress or (lambda *a, **k: None)
    root = repo_root(repo)
    shas = {side: resolve_commit(root, rev) for side, rev in zip(SIDES, (base, head))}
    seed = secrets.randbits(32) if seed is None else seed
    order = pair_order(seed, start_pair + pairs)[start_pair:]
    ws = Workspace(root, Path(cache_dir) if cache_dir else None)
    stop = should_stop or (lambda: False)
    host_before = cpu_snapshot()

    def one(side: str, rep: int) -> ResultDocument:
        def relay(event: str, **kw: object) -> None:
            say("measure_" + event, side=side, pair=rep, **kw)

        return measure(root, shas[side], backend=backend, reps=1, config=config, core=core, cache_dir=ws.cache_dir,
                       progress=relay, sim_family=sim_family, cores=cores, reuse=reuse)

    # Both builds before the first run: a compile between runs would put the host in another state.
    failed: dict[str, ResultDocument] = {}
    for side in SIDES:
        say("build", side=side, sha=shas[side])
        try:
            build = ws.build(shas[side], on_step=lambda step, side=side: say("build_step", side=side, step=step))
        except BuildFailed:
            failed[side] = one(side, start_pair)  # the measure path turns the cached failure into a result
            continue
        say("built", side=side, sha=shas[side], cached=build.cached)
    if failed:
        return _failed_builds(shas, failed, seed)

    docs: dict[str, list[ResultDocument]] = {side: [] for side in SIDES}
    run_order: list[tuple[int, str]] = []
    broken: tuple[str, ResultDocument] | None = None
    for i, first in enumerate(order):
        rep = start_pair + i
        for side in (first, SIDES[1 - SIDES.index(first)]):
            if stop():
                raise Stopped(i, pairs)
            say("run", pair=rep, side=side, pairs=start_pair + pairs)
            doc = one(side, rep)
            run_order.append((rep, side))
            if doc.status != "ok":
                broken = (side, doc)
                break
            docs[side].append(doc)
        if broken:
            break
    complete = min(len(docs["base"]), len(docs["head"]))
    merged = {side: _merge(docs[side][:complete], start_pair, ws.cache_dir, host_before) for side in SIDES}
    if broken is not None:
        side, doc = broken
        kept = merged[side].samples if merged[side] is not None else []
        merged[side] = doc.model_copy(update={"samples": kept, "reason": f"pair {start_pair + complete}: {doc.reason}"})
        other = SIDES[1 - SIDES.index(side)]
        if merged[other] is None:  # the very first run failed: the other side has nothing either
            merged[other] = doc.model_copy(update={"commit": shas[other], "samples": [],
                                                   "reason": f"not measured: the {side} commit's run failed"})
    done = Interleaved(merged["base"], merged["head"], seed, order[:complete], run_order)  # type: ignore[arg-type]
    say("done", pairs=complete)
    return done


def _merge(docs: list[ResultDocument], start_pair: int, cache_dir: Path, since) -> ResultDocument | None:
    """One document per side: every repetition renumbered to its pair, the time span of them all,
    marked noisy when the side's repetitions spread beyond the usual noise; reused (the first run's
    origin) only when every run of the side was."""
    if not docs:
        return None
    samples = [s.model_copy(update={"rep": start_pair + i}) for i, d in enumerate(docs) for s in d.samples]
    reused = docs[0].reused_from if all(d.reused_from is not None for d in docs) else None
    merged = docs[0].model_copy(update={"samples": samples, "finished_at": docs[-1].finished_at, "noisy": None,
                                        "reused_from": reused})
    return noisy.mark(merged, cache_dir, since)


def _failed_builds(shas: dict[str, str], failed: dict[str, ResultDocument], seed: int) -> Interleaved:
    """A side that builds is not measured when the other does not: there is nothing to pair it with."""
    docs = dict(failed)
    broken, reference = next(iter(failed.items()))
    for side in SIDES:
        if side not in docs:
            docs[side] = reference.model_copy(update={
                "commit": shas[side], "status": "run_failed", "samples": [], "log_tail": None,
                "reason": f"not measured: the {broken} commit does not build"})
    return Interleaved(docs["base"], docs["head"], seed)
