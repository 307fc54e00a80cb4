"""``perfci compare --measure``: two commits measured interleaved here, decided on paired differences.

    interleave(base, head, pairs)  ->  paired verdict per metric (minimum effect from the series)
        -> while the deciding metric is UNKNOWN and the budget allows: more pairs, same seed

Each look tests at alpha / (number of looks the budget allows), so the loop as a whole calls an
unchanged commit DIFFERENT at most alpha of the time (:func:`~perfci_core.analysis.paired.sequential_alpha`).

The minimum effect of each metric is the one detection would use on the metric's series on this
machine x config x backend (:func:`perfci_core.analysis.min_effect.min_effect_of_series`): the
server's series when a server, repository and machine are given, else the local history
(:mod:`.history`), else the fixed floor with a note. Both documents are kept in the local result
cache afterwards, so the local history (and ``perfci bisect``) can use them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from perfci_core import metrics as catalogue
from perfci_core.analysis.compare import Comparison, Verdict
from perfci_core.analysis.compare import DEFAULT_ALPHA
from perfci_core.analysis.min_effect import MinEffect, min_effect_of_series
from perfci_core.analysis.paired import paired_compare, sequential_alpha
from perfci_core.analysis.series import Point
from perfci_core.result import ResultDocument

from .bisect.cache import ResultCache
from .errors import UsageError
from .history import local_series
from .interleave import Interleaved, interleave
from .measure import config_named
from .workspace import repo_root

SeriesSource = Callable[[str, str], "tuple[list[Point], str] | None"]  # (metric, backend) -> points, where
DECIDING = {"tsc": "cpp", "pmu": "cpp", "sim": "ipp"}
PAIRS_STEP = 4


@dataclass
class MetricVerdict:
    metric: str
    backend: str
    comparison: Comparison
    min_effect: MinEffect
    pairs: list[tuple[float, float]]

    @property
    def worse(self) -> bool:
        c = self.comparison
        return c.verdict is Verdict.DIFFERENT and catalogue.get(self.metric).is_regression(1.0, 1.0 + c.rel_change)

    def to_dict(self) -> dict:
        c = self.comparison
        m = catalogue.get(self.metric)

        def num(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None

        return {"metric": self.metric, "backend": self.backend, "unit": m.unit, "direction": m.direction.value,
                "verdict": c.verdict.value, "kind": c.kind.value, "worse": self.worse,
                "base_median": num(c.before_median), "head_median": num(c.after_median),
                "change_pct": num(100.0 * c.rel_change), "p_value": None if c.exact else num(c.p_value),
                "test": "exact-change rule" if c.exact else "Wilcoxon signed-rank on per-pair log ratios",
                "n_pairs": c.n_before, "high_threshold": num(c.high_threshold),
                "min_effect": self.min_effect.to_dict(), "notes": list(c.notes), "pairs": [list(p) for p in self.pairs]}


@dataclass
class MeasuredComparison:
    run: Interleaved
    verdicts: list[MetricVerdict] = field(default_factory=list)
    deciding: str | None = None
    budget: int = 0
    alpha: float = DEFAULT_ALPHA  # the level of each look (the loop's alpha split over its looks)

    @property
    def regressed(self) -> list[MetricVerdict]:
        return [v for v in self.verdicts if v.worse]

    def to_dict(self) -> dict:
        base, head = self.run.base, self.run.head
        return {"mode": "measured", "base": base.commit, "head": head.commit, "backend": base.backend.value,
                "config": base.config.name, "machine_id": base.machine_id, "status": {"base": base.status, "head": head.status},
                "reason": {"base": base.reason, "head": head.reason},
                "interleave": self.run.to_dict(), "deciding_metric": self.deciding, "max_pairs": self.budget,
                "alpha": self.alpha,
                "noisy": {"base": _dump(base.noisy), "head": _dump(head.noisy)},
                "metrics": [v.to_dict() for v in self.verdicts],
                "regressed": [f"{v.metric}/{v.backend}" for v in self.regressed]}


def _dump(mark) -> dict | None:
    return None if mark is None else mark.model_dump(mode="json")


def _merge(earlier: Interleaved, more: Interleaved) -> Interleaved:
    def join(a: ResultDocument, b: ResultDocument) -> ResultDocument:
        return b.model_copy(update={"samples": a.samples + b.samples, "started_at": a.started_at,
                                    "noisy": b.noisy or a.noisy})

    if not more.ok:
        return Interleaved(more.base.model_copy(update={"samples": earlier.base.samples + more.base.samples}),
                           more.head.model_copy(update={"samples": earlier.head.samples + more.head.samples}),
                           earlier.seed, earlier.first + more.first, earlier.run_order + more.run_order)
    return Interleaved(join(earlier.base, more.base), join(earlier.head, more.head), earlier.seed,
                       earlier.first + more.first, earlier.run_order + more.run_order)


def measured_compare(
    repo: str | Path,
    base: str,
    head: str,
    *,
    pairs: int = 10,
    max_pairs: int = 26,
    seed: int | None = None,
    backend: str = "auto",
    config: str = "self-64B",
    metrics: list[str] | None = None,
    core: int | None = None,
    cache_dir: str | Path | None = None,
    series_source: SeriesSource | None = None,
    min_effect: float | None = None,
    progress: Callable[..., None] | None = None,
) -> MeasuredComparison:
    """Measure and decide. ``series_source(metric, backend)`` gives a metric's series and where
    it comes from (the server's), or None; the local history is asked next. ``min_effect``
    (relative) overrides the learned minimum effect for every metric."""
    if not 1 <= pairs <= max_pairs <= 100:
        raise UsageError(f"--pairs must be between 1 and --max-pairs (<= 100), got {pairs} and {max_pairs}")
    if min_effect is not None and not 0.0 <= min_effect < 1.0:
        raise UsageError(f"--min-effect is a relative change in [0, 1), got {min_effect}")
    for name in metrics or []:
        try:
            catalogue.get(name)
        except KeyError as exc:
            raise UsageError(str(exc.args[0])) from None
    config_named(config)
    root = repo_root(repo)
    cache = Path(cache_dir) if cache_dir else root / ".perfci"
    say = progress or (lambda *a, **k: None)
    run = interleave(root, base, head, pairs, seed=seed, backend=backend, config=config, core=core,
                     cache_dir=cache, progress=say)
    result = MeasuredComparison(run, budget=max_pairs, alpha=sequential_alpha(DEFAULT_ALPHA, pairs, max_pairs, PAIRS_STEP))
    if not run.ok:
        return result
    chosen = run.base.backend.value
    if metrics:
        unmeasured = [m for m in metrics if catalogue.Backend(chosen) not in catalogue.get(m).backends]
        if unmeasured:
            raise UsageError(f"backend {chosen} does not measure {', '.join(unmeasured)}")
    alpha = result.alpha
    effects: dict[str, MinEffect] = {}
    if min_effect is not None and chosen != "sim":
        given = MinEffect(min_effect, "given", None, 0, f"{min_effect:.2%} given on the command line (--min-effect)")
        effects = {m.metric: given for s in run.base.samples for m in s.metrics}
    while True:
        result.verdicts = _decide(root, cache, run, metrics, effects, series_source, alpha)
        deciding = metrics[0] if metrics else DECIDING.get(chosen)
        result.deciding = deciding
        verdict = next((v.comparison.verdict for v in result.verdicts if v.metric == deciding), None)
        if verdict is not Verdict.UNKNOWN or run.pairs >= max_pairs:
            break
        more = min(PAIRS_STEP, max_pairs - run.pairs)
        say("more_pairs", metric=deciding, pairs=run.pairs, more=more)
        run = _merge(run, interleave(root, base, head, more, seed=run.seed, start_pair=run.pairs, backend=chosen,
                                     config=config, core=core, cache_dir=cache, progress=say))
        result.run = run
        if not run.ok:
            break
    _keep(cache, config, run)
    return result


def _decide(root: Path, cache: Path, run: Interleaved, metrics: list[str] | None, effects: dict[str, MinEffect],
            series_source: SeriesSource | None, alpha: float) -> list[MetricVerdict]:
    backend = run.base.backend.value
    names = metrics or sorted({m.metric for s in run.base.samples for m in s.metrics if m.backend == run.base.backend})
    verdicts = []
    for name in names:
        before, after = run.values(name)
        if not before:
            continue
        if name not in effects:
            effects[name] = _min_effect(root, cache, run, name, series_source)
        c = paired_compare(before, after, name, backend=backend, alpha=alpha, min_effect=effects[name].value)
        verdicts.append(MetricVerdict(name, backend, c, effects[name], list(zip(before, after))))
    return verdicts


def _min_effect(root: Path, cache: Path, run: Interleaved, metric: str, series_source: SeriesSource | None) -> MinEffect:
    backend = run.base.backend.value
    if backend == "sim":
        return MinEffect(0.0, "exact", None, 0, "sim: the exact-change rule (no minimum effect)")
    notes = []
    if series_source is not None:
        found = series_source(metric, backend)
        if found is not None:
            points, where = found
            learned = min_effect_of_series(points, where)
            if learned.source == "series":
                return learned
            notes.append(learned.note)
    where = f"local history of {metric}/{backend} on this machine x {run.base.config.name}"
    learned = min_effect_of_series(local_series(root, cache, run.base.machine_id, run.base.config.name, backend, metric), where)
    if notes:
        learned = MinEffect(learned.value, learned.source, learned.noise, learned.points, "; ".join([*notes, learned.note]))
    return learned


def _keep(cache: Path, config: str, run: Interleaved) -> None:
    results = ResultCache(cache)
    for doc in (run.base, run.head):
        if doc.status == "ok":
            results.store(config, doc)
