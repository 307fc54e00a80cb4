"""``sim`` counts measured once per binary: a job this machine has already simulated takes those counts
(docs/operations.md, "Running an agent").

sim's counts are exact and deterministic (identical run to run and from any cache directory:
:mod:`.sim`), so a measurement is a function of what went into it. When all of it equals an earlier
ok measurement here (:func:`identity`: the build key and the routes file the config names; the machine
fingerprint and C library; memhazard's folder, named by a hash of its sources and of the valgrind
it is built for, and a hash of the agent's code between valgrind and the raw counts; the
store-buffer family, store-commit rule, cache geometry and lcores; the config as sim runs it), the
job takes that measurement's samples, and its document says so (``reused_from``: the commit and
times of the measurement). Only a measurement whose repetitions are identical is kept; it serves
jobs of at most as many repetitions, its metrics derived again from the raw counts. One file per
identity, ``<cache>/sim-counts/<sha256>.json``, written whole (rename).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import posixpath
from pathlib import Path

from perfci_core import metrics
from perfci_core.result import BenchConfig, ResultDocument, ReusedFrom, Sample

from .. import runner
from ..hazards import report
from ..workspace import Build
from . import metric_values, sim
from .sim import SimBackend

log = logging.getLogger(__name__)
SCHEMA = "perfci.sim-counts/1"
# The agent's code between valgrind and the raw counts: a change there may change the counts.
RECIPE = tuple(Path(module.__file__) for module in (sim, runner, report))


def recipe_hash() -> str:
    h = hashlib.sha256()
    for path in RECIPE:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def identity(backend: SimBackend, build: Build, config: BenchConfig, machine_id: str) -> dict[str, str] | None:
    """Everything a sim measurement's counts depend on, or None: this one is always simulated."""
    routes = build.sources.blob(posixpath.normpath(config.routes)) if config.routes != "default" else "default"
    if routes is None:  # not a file of the commit's run data
        return None
    return {
        "build": build.key.digest,
        "routes": routes,
        "machine_id": machine_id,
        "libc": " ".join(platform.libc_ver()),
        "tool": backend.tool_lib().name,
        "recipe": recipe_hash(),
        "family": backend.family.name,
        "commit_rule": backend.commit_rule,
        "geometry": " ".join(backend.geometry.args()) if backend.cache_sim else "off",
        "lcores": str(backend.lcores),
        "config": json.dumps(config.model_dump(mode="json"), sort_keys=True),
    }


class SimCounts:
    """The kept measurement of one :func:`identity` (``None``: nothing is kept or reused)."""

    def __init__(self, cache_dir: Path, ident: dict[str, str] | None) -> None:
        self.identity = ident
        digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()
        self.path = cache_dir / "sim-counts" / f"{digest}.json"

    def _load(self) -> dict | None:
        if self.identity is None:
            return None
        try:
            kept = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable kept sim counts %s: %s", self.path, exc)
            return None
        if kept.get("schema") != SCHEMA or kept.get("identity") != self.identity:
            return None
        return kept

    def lookup(self, reps: int) -> tuple[list[Sample], ReusedFrom] | None:
        """``reps`` samples of the kept measurement and where they come from, or None."""
        kept = self._load()
        if kept is None or len(kept["samples"]) < reps:
            return None
        samples = [Sample(rep=i, raw=raw, metrics=metric_values(metrics.derive_sim(raw), metrics.Backend.SIM))
                   for i, raw in enumerate(kept["samples"][:reps])]
        return samples, ReusedFrom.model_validate(kept["origin"])

    def record(self, doc: ResultDocument) -> None:
        """Keep ``doc``'s samples if it is an ok sim measurement (not itself reused) whose repetitions
        are identical, and it has at least as many as the one kept."""
        if self.identity is None or doc.status != "ok" or doc.reused_from is not None or doc.backend is not metrics.Backend.SIM:
            return
        raws = [s.raw for s in sorted(doc.samples, key=lambda s: s.rep)]
        if any(raw != raws[0] for raw in raws):
            log.warning("sim repetitions of %s differ: not kept for reuse", doc.commit[:12])
            return
        kept = self._load()
        if kept is not None and len(kept["samples"]) > len(raws):
            return
        origin = ReusedFrom(commit=doc.commit, started_at=doc.started_at, finished_at=doc.finished_at)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"schema": SCHEMA, "identity": self.identity, "origin": origin.model_dump(mode="json"),
                                   "samples": raws}))
        tmp.replace(self.path)
