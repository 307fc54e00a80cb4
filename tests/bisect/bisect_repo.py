"""The real 16-commit dataplane repository of the bisect tests (and of the end-to-end bisect through
an agent, tests/e2e): its layout and how it is made.

Commit layout (index: change), chosen so one search meets every case the issue names:

    0  good: the project's dataplane with regression (e) applied (a needless full barrier)
    1-2, 4-6, 10-14  neutral edits (README)
    3  improvement: the barrier removed again (reverse of regression (e))
    7  does not build (a syntax error) ... 8 fixes it
    9  the regression: ttl_decrement forced out of line (regression (d))
    15 bad

The search's first middle is 7 (unbuildable, skipped), then 8 — after the improvement, before
the regression — then 11, then 9: six builds for sixteen commits, the bound ceil(log2 16) + 2.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATAPLANE = ROOT / "dataplane"
PATCHES = DATAPLANE / "regressions"
REGRESSION_INDEX, IMPROVEMENT_INDEX, BROKEN_INDEX = 9, 3, 7


def git(repo: Path, *args: str, author: str | None = None) -> str:
    env_args = ["-c", f"user.name={author or 'perfci test'}", "-c", "user.email=test@perfci.invalid"]
    return subprocess.run(["git", *env_args, "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def _build_dirs(directory: str, names: list[str]) -> list[str]:
    return [n for n in names if n.startswith("build") and Path(directory) == DATAPLANE and (DATAPLANE / n).is_dir()]


def make_repository(repo: Path) -> list[str]:
    """Create the repository in the empty directory ``repo``; its 16 commit SHAs, oldest first."""
    repo.mkdir()
    shutil.copytree(DATAPLANE, repo / "dataplane", ignore=_build_dirs)
    git(repo, "init", "-q", "-b", "main")
    readme = repo / "dataplane" / "README.md"
    routes = repo / "dataplane" / "src" / "routes.c"
    shas: list[str] = []

    def commit(message: str, author: str | None = None) -> None:
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", message, author=author)
        shas.append(git(repo, "rev-parse", "HEAD"))

    git(repo, "apply", str(PATCHES / "e-full-barrier.patch"))
    commit("dataplane with a full barrier per burst")
    for i in range(1, 16):
        if i == IMPROVEMENT_INDEX:
            git(repo, "apply", "-R", str(PATCHES / "e-full-barrier.patch"))
            commit("fwd: drop the needless full barrier per burst")
        elif i == BROKEN_INDEX:
            routes.write_text(routes.read_text() + "\nthis is not C;\n")
            commit("routes: work in progress")
        elif i == BROKEN_INDEX + 1:
            git(repo, "checkout", "-q", shas[BROKEN_INDEX - 1], "--", "dataplane/src/routes.c")
            commit("routes: fix the build")
        elif i == REGRESSION_INDEX:
            git(repo, "apply", str(PATCHES / "d-helper-out-of-line.patch"))
            commit("fwd: keep ttl_decrement out of line for readability", author="Rita Gression")
        else:
            readme.write_text(readme.read_text() + f"\nNote {i}.\n")
            commit(f"docs: note {i}")
    assert len(shas) == 16
    return shas
