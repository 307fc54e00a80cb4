"""A clean checkout and a cached build of ``dataplane/`` per commit.

Layout under the cache directory (default ``<repo>/.perfci``, git-ignored):

    worktrees/<sha>/        git worktree --detach at <sha> (never the user's working tree)
    builds/<sha>/           meson build directory; ``perfci-fwd`` inside
    builds/<sha>/status.json  {"status": "ok"|"build_failed", "log_tail": ...}
    builds/<sha>/build.log    full meson + ninja output

A commit is built at most once: a later measurement of the same sha reuses the binary (or the
recorded failure). Only the commit's own failures are recorded (meson or ninja failed, or the commit
has no dataplane/meson.build in git); a build that could not run here (a tool missing, a timeout) is
tried again next time. ``rebuild=True`` drops what is recorded. A per-sha lock file serialises
concurrent agents on one machine.

The cache directory is made absolute once, here (:func:`cache_root`): git creates worktrees
relative to the repository, the build runs in the worktree, valgrind reads its tool folder from
the environment, and each would read a relative path against another directory.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .errors import BuildFailed, UsageError

LOG_TAIL_LINES = 60
BINARY = "perfci-fwd"


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, errors="replace", check=check,
                          timeout=300)


def repo_root(path: str | Path) -> Path:
    p = Path(path).expanduser()
    if not p.is_dir():
        raise UsageError(f"repository {str(path)!r} does not exist")
    bare = _git(p, "rev-parse", "--is-bare-repository", check=False)
    if bare.returncode != 0:
        raise UsageError(f"{str(path)!r} is not a git repository")
    if bare.stdout.strip() == "true":  # the agent's mirrors: worktrees are added from the git dir itself
        return Path(_git(p, "rev-parse", "--absolute-git-dir").stdout.strip())
    r = _git(p, "rev-parse", "--show-toplevel", check=False)
    if r.returncode != 0:
        raise UsageError(f"{str(path)!r} is not a git repository")
    return Path(r.stdout.strip())


def resolve_commit(repo: Path, rev: str) -> str:
    if rev.startswith("-"):
        raise UsageError(f"bad revision {rev!r}")
    r = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if r.returncode != 0 or not r.stdout.strip():
        raise UsageError(f"unknown commit {rev!r} in {repo}")
    return r.stdout.strip()


def tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class Build:
    sha: str
    worktree: Path
    build_dir: Path
    cached: bool

    @property
    def binary(self) -> Path:
        return self.build_dir / BINARY


def cache_root(repo: Path, cache_dir: str | Path | None = None) -> Path:
    """The cache directory, absolute (a relative one is taken from the current directory);
    default ``<repo>/.perfci``."""
    return (Path(cache_dir).expanduser() if cache_dir else repo / ".perfci").resolve()


def has_dataplane(repo: Path, sha: str) -> bool:
    """Does the commit itself (not a checkout of it) hold dataplane/meson.build?"""
    return _git(repo, "cat-file", "-e", f"{sha}:dataplane/meson.build", check=False).returncode == 0


class Workspace:
    def __init__(self, repo: Path, cache_dir: str | Path | None = None) -> None:
        self.repo = repo
        self.cache_dir = cache_root(repo, cache_dir)

    @contextmanager
    def _lock(self, sha: str) -> Iterator[None]:
        lock_dir = self.cache_dir / "locks"
        lock_dir.mkdir(parents=True, exist_ok=True)
        with open(lock_dir / f"{sha}.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def worktree(self, sha: str) -> Path:
        """A clean checkout of ``sha`` (created, or reset and cleaned if it exists)."""
        wt = self.cache_dir / "worktrees" / sha
        if wt.exists() and _git(wt, "rev-parse", "HEAD", check=False).stdout.strip() == sha:
            _git(wt, "reset", "--quiet", "--hard", sha)
            _git(wt, "clean", "-qfdx")
            return wt
        if wt.exists():
            shutil.rmtree(wt)
        _git(self.repo, "worktree", "prune")
        wt.parent.mkdir(parents=True, exist_ok=True)
        r = _git(self.repo, "worktree", "add", "--detach", "--force", str(wt), sha, check=False)
        if r.returncode != 0:
            raise UsageError(f"cannot check out {sha[:12]}: {r.stderr.strip()}")
        return wt

    def build(self, sha: str, on_step=None, rebuild: bool = False) -> Build:
        """The built dataplane at ``sha``; raises :class:`BuildFailed` with the log tail.
        ``rebuild``: forget the cached build or failure and build again."""
        build_dir = self.cache_dir / "builds" / sha
        status_file = build_dir / "status.json"
        wt = self.cache_dir / "worktrees" / sha
        with self._lock(sha):
            if rebuild and build_dir.exists():
                shutil.rmtree(build_dir)
            if status_file.exists():
                status = json.loads(status_file.read_text())
                if status.get("status") == "ok" and (build_dir / BINARY).exists() and wt.exists():
                    return Build(sha, wt, build_dir, cached=True)
                if status.get("status") == "build_failed":
                    raise BuildFailed(status.get("reason", "build failed"), status.get("log_tail", ""))
            if on_step:
                on_step("checkout")
            wt = self.worktree(sha)
            src = wt / "dataplane"
            if not (src / "meson.build").exists():
                if has_dataplane(self.repo, sha):
                    raise BuildFailed(f"the checkout {wt} lacks dataplane/meson.build, which commit {sha[:12]} has",
                                      "", of_commit=False)
                return self._fail(build_dir, "no dataplane/meson.build at this commit", "")
            if build_dir.exists():
                shutil.rmtree(build_dir)
            try:
                compile_tree(src, build_dir, on_step)
            except BuildFailed as exc:
                if not exc.of_commit:
                    raise
                return self._fail(build_dir, str(exc), exc.log_tail)
            status_file.write_text(json.dumps({"status": "ok"}))
            return Build(sha, wt, build_dir, cached=False)

    def _fail(self, build_dir: Path, reason: str, log_tail: str) -> Build:
        build_dir.mkdir(parents=True, exist_ok=True)
        (build_dir / "status.json").write_text(json.dumps({"status": "build_failed", "reason": reason, "log_tail": log_tail}))
        raise BuildFailed(reason, log_tail)


def compile_tree(src: Path, build_dir: Path, on_step=None) -> Path:
    """meson setup (once per build directory) and ninja of a dataplane source tree.

    Returns the binary; raises :class:`BuildFailed` with the log tail. The full log is kept in
    ``build_dir/build.log``.
    """
    build_dir.mkdir(parents=True, exist_ok=True)
    steps = [("compile", ["ninja", "-C", str(build_dir)])]
    if not (build_dir / "build.ninja").exists():  # afterwards ninja reconfigures by itself
        steps.insert(0, ("configure", ["meson", "setup", str(build_dir), str(src), "--buildtype=release"]))
    log: list[str] = []
    for step, cmd in steps:
        if on_step:
            on_step(step)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=1800, cwd=src.parent)
        except FileNotFoundError:
            raise BuildFailed(f"{cmd[0]} is not installed", "", of_commit=False) from None
        except subprocess.TimeoutExpired:
            raise BuildFailed(f"{step} timed out", tail("\n".join(log)), of_commit=False) from None
        log.append(f"$ {' '.join(cmd)}\n{r.stdout}{r.stderr}")
        (build_dir / "build.log").write_text("\n".join(log))
        if r.returncode != 0:
            raise BuildFailed(f"{step} failed (exit {r.returncode})", tail("\n".join(log)))
    if not (build_dir / BINARY).exists():
        raise BuildFailed(f"the build produced no {BINARY}", tail("\n".join(log)))
    return build_dir / BINARY
