"""A metric's local history: the results this machine measured before, as a commit-ordered series.

The local result cache (:class:`~.bisect.cache.ResultCache`, ``<cache>/results/<machine>/<config>/
<backend>/<sha>/``) holds every document ``perfci bisect`` and ``perfci compare --measure`` stored.
A series needs commit order: the commits are ordered by their committer date in the repository
(commits it no longer has are left out). Runs marked noisy are left out too: their spread says
more about the host at that moment than about the commit, and they would teach the minimum effect
a noise the machine does not usually have.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from perfci_core.analysis.series import Point

from .bisect.cache import ResultCache


def commit_times(repo: Path, shas: list[str]) -> dict[str, int]:
    """Committer time (unix) of each sha the repository has."""
    if not shas:
        return {}
    r = subprocess.run(["git", "-C", str(repo), "log", "--no-walk=unsorted", "--ignore-missing", "--format=%H %ct", *shas],
                       capture_output=True, text=True, errors="replace", timeout=120)
    times = {}
    for line in r.stdout.splitlines():
        sha, _, ct = line.partition(" ")
        if ct.isdigit():
            times[sha] = int(ct)
    return times


def local_series(repo: Path, cache_dir: Path, machine_id: str, config: str, backend: str, metric: str) -> list[Point]:
    """Every earlier ok, not-noisy measurement of ``metric`` on this machine x config x backend,
    one point per commit in commit-date order."""
    cache = ResultCache(cache_dir)
    folder = cache.root / machine_id / config / backend
    if not folder.is_dir():
        return []
    values: dict[str, list[float]] = {}
    for sha_dir in folder.iterdir():
        for _, doc in cache.load(machine_id, config, backend, sha_dir.name):
            if doc.status != "ok" or doc.noisy is not None:
                continue
            values.setdefault(doc.commit, []).extend(
                m.value for s in doc.samples for m in s.metrics if m.metric == metric and m.backend.value == backend)
    times = commit_times(repo, sorted(values))
    ordered = sorted((sha for sha in values if sha in times and values[sha]), key=lambda sha: (times[sha], sha))
    return [Point.of(sha, values[sha]) for sha in ordered]
