"""Marking a measurement noisy: its repetitions spread far beyond this machine's usual noise.

The decision (thresholds, what "usual" means) is :mod:`perfci_core.analysis.noise`'s; this module
feeds it: the spread of cycles per packet (the metric every noisy backend measures and the one
the host's load moves first), this machine's usual spread from its earlier runs, and the host's
load over the measurement (:mod:`.hostload`). ``sim`` is deterministic and never noisy.

The usual spread is kept per machine x backend x config in ``<cache>/noise/<key>.json``: the
spreads of the last :data:`HISTORY` runs that were not noisy (a noisy run would teach the machine
that noise is usual).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from perfci_core.analysis import noise
from perfci_core.result import NoisyRun, ResultDocument

from .hostload import CpuSnapshot, host_load

METRIC = "cpp"
HISTORY = 50


def history_path(cache_dir: Path, doc: ResultDocument) -> Path:
    return cache_dir / "noise" / f"{doc.machine_id[:16]}-{doc.backend.value}-{doc.config.name}.json"


def earlier_spreads(path: Path) -> list[float]:
    try:
        data = json.loads(path.read_text())
        return [float(x) for x in data["spreads"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []  # no history yet (or an unreadable one): the absolute threshold applies


def remember(path: Path, spreads: list[float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"metric": METRIC, "spreads": spreads[-HISTORY:]}))
    tmp.replace(path)


def mark(doc: ResultDocument, cache_dir: Path, since: CpuSnapshot | None, remeasured: int = 0) -> ResultDocument:
    """``doc`` with ``noisy`` set when its repetitions spread beyond the usual noise (and this
    machine's history updated when they do not). Anything but an ``ok`` noisy-backend run is
    returned unchanged."""
    if doc.status != "ok" or doc.backend.value == "sim":
        return doc
    values = np.array([m.value for s in doc.samples for m in s.metrics if m.metric == METRIC and m.backend == doc.backend])
    spread = noise.spread_of(values)
    if spread is None:
        return doc
    path = history_path(cache_dir, doc)
    earlier = earlier_spreads(path)
    limit, basis = noise.noisy_threshold(noise.usual_spread(earlier))
    if spread.relative <= limit:
        remember(path, earlier + [spread.relative])
        return doc
    load = host_load(since)
    mark_ = NoisyRun(metric=METRIC, spread=spread.relative, low=spread.low, high=spread.high, threshold=limit, basis=basis,
                     loadavg=load.loadavg, steal_pct=load.steal_pct, runnable=load.runnable, cpus=load.cpus,
                     remeasured=remeasured)
    return doc.model_copy(update={"noisy": mark_})


def describe(mark_: NoisyRun) -> str:
    load = f"load average {mark_.loadavg[0]:g}" if mark_.loadavg else "load average unknown"
    steal = f", steal {mark_.steal_pct:g} %" if mark_.steal_pct is not None else ""
    runnable = f", {mark_.runnable} runnable task(s) on {mark_.cpus} CPU(s)" if mark_.runnable is not None else ""
    return (f"noisy: {mark_.metric} spread {mark_.spread:.1%} (runs at {mark_.low:.0%}-{mark_.high:.0%} of the median), "
            f"above {mark_.threshold:.1%} = {mark_.basis}; {load}{steal}{runnable}")
