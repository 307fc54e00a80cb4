"""Shared fixtures for the agent tests: a scratch git repo made from the project's dataplane/."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATAPLANE = ROOT / "dataplane"
FIXTURES = Path(__file__).parent / "fixtures"
REGRESSION = DATAPLANE / "regressions" / "d-helper-out-of-line.patch"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="session")
def scratch_repo(tmp_path_factory) -> dict[str, object]:
    """Three commits: base (the project's dataplane/), + one regression patch, + a compile error."""
    repo = tmp_path_factory.mktemp("scratch") / "repo"
    repo.mkdir()
    def build_dirs(directory: str, names: list[str]) -> list[str]:
        # only the top-level build trees (dataplane/build*), not src/build_id.h.in
        return [n for n in names if n.startswith("build") and Path(directory) == DATAPLANE and (DATAPLANE / n).is_dir()]

    shutil.copytree(DATAPLANE, repo / "dataplane", ignore=build_dirs)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "test@perfci.invalid")
    git(repo, "config", "user.name", "perfci test")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "apply", str(REGRESSION))
    git(repo, "commit", "-qam", "regression: " + REGRESSION.name)
    regressed = git(repo, "rev-parse", "HEAD")
    fwd = repo / "dataplane" / "src" / "fwd.c"
    fwd.write_text(fwd.read_text() + "\nthis is not C;\n")
    git(repo, "commit", "-qam", "broken build")
    broken = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", base)
    return {"repo": repo, "base": base, "regressed": regressed, "broken": broken,
            "cache": tmp_path_factory.mktemp("perfci-cache")}
