"""Bare mirrors of the repositories the agent builds, one per clone URL, fetched on demand.

``perfci measure`` takes the mirror as its repository: worktrees and builds are made from it
exactly as from a working clone (same code path). A mirror is cloned once and only fetched when a
job names a commit it does not have yet. A lock file per mirror serialises agents sharing a cache.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..workspace import tail

GIT_TIMEOUT = 900.0
# Never wait for a password on a terminal nobody watches.
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "/bin/true", "SSH_ASKPASS": "/bin/true"}


class FetchFailed(Exception):
    """The commit could not be fetched (not the commit's fault): ``log_tail`` has git's output."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


def _git(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, errors="replace", timeout=GIT_TIMEOUT,
                              env={**os.environ, **_GIT_ENV})
    except subprocess.TimeoutExpired:
        raise FetchFailed(f"git {args[0]} timed out after {GIT_TIMEOUT:.0f} s") from None


class MirrorCache:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path_for(self, clone_url: str) -> Path:
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", clone_url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git"))[:60]
        digest = hashlib.sha256(clone_url.encode()).hexdigest()[:12]
        return self.root / f"{name or 'repo'}-{digest}.git"

    @contextmanager
    def _lock(self, mirror: Path) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(mirror.with_suffix(".lock"), "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def has_commit(self, mirror: Path, sha: str) -> bool:
        return _git(["cat-file", "-e", f"{sha}^{{commit}}"], cwd=mirror).returncode == 0

    def fetch(self, clone_url: str, sha: str) -> tuple[Path, str]:
        """The mirror holding ``sha`` and what was done ("cached", "fetched", "cloned")."""
        mirror = self.path_for(clone_url)
        with self._lock(mirror):
            if not (mirror / "HEAD").exists():
                self._clone(clone_url, mirror)
                action = "cloned"
            elif self.has_commit(mirror, sha):
                return mirror, "cached"
            else:
                self._run(["fetch", "--prune", "--quiet", "origin"], mirror, f"fetching {clone_url}")
                action = "fetched"
            if not self.has_commit(mirror, sha):
                # Not on any branch or tag (a force-pushed or PR-only commit): ask for it by id.
                r = _git(["fetch", "--quiet", "origin", sha], cwd=mirror)
                if r.returncode != 0 or not self.has_commit(mirror, sha):
                    raise FetchFailed(f"commit {sha} is not in {clone_url} (after fetching every ref and the id itself)",
                                      tail(r.stdout + r.stderr))
        return mirror, action

    def _clone(self, clone_url: str, mirror: Path) -> None:
        partial = mirror.with_name(mirror.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        self._run(["clone", "--mirror", "--quiet", clone_url, str(partial)], None, f"cloning {clone_url}")
        os.replace(partial, mirror)

    @staticmethod
    def _run(args: list[str], cwd: Path | None, what: str) -> None:
        r = _git(args, cwd)
        if r.returncode != 0:
            raise FetchFailed(f"{what} failed (git exit {r.returncode}): {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ''}",
                              tail(r.stdout + r.stderr))
