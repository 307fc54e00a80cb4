"""One cached build of ``dataplane/`` per source tree (docs/operations.md, "Running an agent").

    builds/<key>/                 a finished build, renamed into place whole (built or failed)
    builds/<key>/tree/dataplane/  its inputs, exported from git: all of the repository the build sees
    builds/<key>/build/           meson build directory: ``perfci-fwd``, ``build.log``
    builds/<key>/status.json      ok or build_failed (reason, log tail), the commit, inputs and toolchain
    builds/.<key>.XXXXXXXX/       a build under way;  locks/<key>.lock: one builder per key

``<key>`` (:func:`build_key`): sha256 of the git entries of every file of ``dataplane/`` but
:data:`NOT_INPUTS` (documentation, and the regression patches, which the build does not read) and
of the toolchain (:func:`toolchain`), which the cache outlives. Listing what is left out rather than
the inputs keeps a new header folder in the key unasked; routes files, which runs read from the
build's ``dataplane/``, are inputs. With no git repository around the export, a build that reads a
left-out file fails rather than depending on it unseen, and ``git describe`` (the embedded build
id) gives ``unknown`` for every commit of a key. Only the commit's own failures are recorded; a
build that could not run here (a tool missing, a timeout) is tried again. Readers need no lock.
The cache directory is made absolute once (:func:`cache_root`): the build runs in the export and
valgrind reads its tool folder from the environment. ``builds/<sha>/`` and ``worktrees/<sha>/`` of
an older perfci (40-hex names; keys have 64) are never read.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Iterator

from .errors import BuildFailed, UsageError

LOG_TAIL_LINES = 60
BINARY = "perfci-fwd"
SOURCE = "dataplane"
# Paths under dataplane/ that are not build inputs (fnmatch; `*` also matches `/`).
NOT_INPUTS = ("*.md", "regressions/*")
MESON_OPTIONS = ("--buildtype=release",)
# The environment variables meson reads that change the binary.
BUILD_ENV = ("CC", "CFLAGS", "CPPFLAGS", "LDFLAGS", "PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR")
KEY_SCHEMA = "perfci.build-key/1"


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
    if bare.stdout.strip() == "true":  # the agent's mirrors
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


def _output(cmd: list[str]) -> str | None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return (r.stdout.strip() or None) if r.returncode == 0 else None


_VERSIONS: dict[tuple, str | None] = {}


def _version(cmd: list[str]) -> str | None:
    """``cmd --version``, asked again only when the executable's file changed (an upgrade replaces
    it): ``meson --version`` starts a Python interpreter, seconds on a loaded host, per job."""
    if shutil.which(cmd[0]) is None:
        return None
    exes = [os.path.realpath(exe) for word in cmd if (exe := shutil.which(word))]  # cc -> gcc-12; ccache gcc: both
    memo = (tuple(cmd), *((exe, (st := os.stat(exe)).st_ino, st.st_mtime_ns, st.st_size) for exe in exes))
    if memo not in _VERSIONS:
        _VERSIONS[memo] = _output([*cmd, "--version"])
    return _VERSIONS[memo]


def toolchain() -> dict[str, str | None]:
    """What decides the binary besides its inputs: the compiler meson picks (``$CC``, else ``cc``),
    DPDK (version and the flags pkg-config gives), meson, the architecture and C library, the flags
    in the environment and the options of the build. None: not found here (the build then fails)."""
    cc = shlex.split(os.environ.get("CC") or "cc")
    return {
        "compiler": _version(cc),
        "dpdk": _output(["pkg-config", "--modversion", "libdpdk"]),
        "dpdk_flags": _output(["pkg-config", "--cflags", "--libs", "libdpdk"]),
        "meson": _version(["meson"]),
        "arch": platform.machine(),
        "libc": " ".join(platform.libc_ver()),  # its headers are compiled in
        "options": " ".join(MESON_OPTIONS),
        **{f"env.{name}": os.environ[name] for name in BUILD_ENV if name in os.environ},
    }


def is_input(path: str) -> bool:
    """Whether ``path`` (relative to dataplane/) is a build input."""
    return not any(fnmatch(path, pattern) for pattern in NOT_INPUTS)


@dataclass(frozen=True)
class BuildKey:
    digest: str  # sha256 hex: the build's directory name
    inputs: tuple[str, ...]  # "<mode> <type> <object>\t<path relative to dataplane/>", git's order
    toolchain: dict[str, str | None] = field(compare=False)

    @property
    def paths(self) -> set[str]:
        return {line.split("\t", 1)[1] for line in self.inputs}

    @property
    def build_id(self) -> str:
        """The result document's ``build_id``: which binary was measured."""
        return f"{self.digest[:16]}-release"


def build_key(repo: Path, sha: str, tools: dict[str, str | None] | None = None) -> BuildKey:
    """The key of the dataplane build of commit ``sha``; :class:`BuildFailed` (the commit's own) when
    the commit has no ``dataplane/meson.build``."""
    r = _git(repo, "ls-tree", "-r", "-z", sha, "--", f"{SOURCE}/", check=False)
    if r.returncode != 0:
        raise UsageError(f"cannot list {SOURCE}/ of {sha[:12]}: {r.stderr.strip()}")
    inputs = []
    for entry in filter(None, r.stdout.split("\0")):
        meta, path = entry.split("\t", 1)
        relative = path.removeprefix(f"{SOURCE}/")
        if is_input(relative):
            inputs.append(f"{meta}\t{relative}")
    if not any(line.endswith("\tmeson.build") for line in inputs):
        raise BuildFailed(f"no {SOURCE}/meson.build at this commit", "")
    tools = toolchain() if tools is None else tools
    material = json.dumps({"schema": KEY_SCHEMA, "inputs": inputs, "toolchain": tools}, sort_keys=True)
    return BuildKey(hashlib.sha256(material.encode()).hexdigest(), tuple(inputs), tools)


def export_inputs(repo: Path, sha: str, key: BuildKey, dest: Path) -> None:
    """Write the build inputs of ``sha`` (and nothing else of it) into ``dest``, from git."""
    wanted = key.paths
    dest.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["git", "-C", str(repo), "archive", "--format=tar", f"{sha}:{SOURCE}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    written = set()
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as archive:
            for member in archive:
                if member.name in wanted:
                    archive.extract(member, dest, filter="data")  # nothing outside dest, whatever the tree holds
                    written.add(member.name)
    except tarfile.TarError as exc:
        proc.kill()
        raise BuildFailed(f"cannot export {SOURCE}/ of {sha[:12]}: {exc}", "") from None
    finally:
        proc.stdout.close()
        err = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
        proc.wait(timeout=300)
    if proc.returncode != 0:
        raise UsageError(f"cannot export {SOURCE}/ of {sha[:12]}: {err.strip()}")
    files = {line.split("\t", 1)[1] for line in key.inputs if line.split(" ", 2)[1] == "blob"}
    if files - written:
        raise BuildFailed(f"the export of {sha[:12]} lacks {', '.join(sorted(files - written)[:5])}", "", of_commit=False)


@dataclass(frozen=True)
class Build:
    sha: str  # the commit asked for (the build may have been made for another commit of the same key)
    key: BuildKey
    directory: Path
    cached: bool

    @property
    def build_dir(self) -> Path:
        return self.directory / "build"

    @property
    def binary(self) -> Path:
        return self.build_dir / BINARY

    @property
    def source(self) -> Path:
        """The exported ``dataplane/``: the runs' working directory (configs name routes files in it)."""
        return self.directory / "tree" / SOURCE


def cache_root(repo: Path, cache_dir: str | Path | None = None) -> Path:
    """The cache directory, absolute (a relative one is taken from the current directory);
    default ``<repo>/.perfci``."""
    return (Path(cache_dir).expanduser() if cache_dir else repo / ".perfci").resolve()


class Workspace:
    def __init__(self, repo: Path, cache_dir: str | Path | None = None) -> None:
        self.repo = repo
        self.cache_dir = cache_root(repo, cache_dir)
        self.builds = self.cache_dir / "builds"
        self._tools: dict[str, str | None] | None = None

    def key(self, sha: str) -> BuildKey:
        """The build key of ``sha`` (the toolchain is read once per workspace)."""
        if self._tools is None:
            self._tools = toolchain()
        return build_key(self.repo, sha, self._tools)

    @contextmanager
    def _lock(self, name: str) -> Iterator[None]:
        lock_dir = self.cache_dir / "locks"
        lock_dir.mkdir(parents=True, exist_ok=True)
        with open(lock_dir / f"{name}.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def build(self, sha: str, on_step=None, rebuild: bool = False) -> Build:
        """The built dataplane of ``sha``'s build key; raises :class:`BuildFailed` with the log tail.
        ``rebuild``: forget the key's build or failure and build again."""
        key = self.key(sha)
        directory = self.builds / key.digest
        if not rebuild and (found := self._finished(sha, key, directory)) is not None:
            return found
        with self._lock(key.digest):
            if not rebuild and (found := self._finished(sha, key, directory)) is not None:
                return found  # another process built it while this one waited
            self._discard(directory)
            return self._build(sha, key, directory, on_step)

    def _finished(self, sha: str, key: BuildKey, directory: Path) -> Build | None:
        """The recorded build of the key (raises its recorded failure), or None: not built, or damaged."""
        try:
            status = json.loads((directory / "status.json").read_text())
        except (OSError, ValueError):
            return None
        build = Build(sha, key, directory, cached=True)
        if status.get("status") == "ok" and build.binary.exists() and build.source.is_dir():
            return build
        if status.get("status") == "build_failed":
            raise BuildFailed(status.get("reason", "build failed"), status.get("log_tail", ""))
        return None

    def _discard(self, directory: Path) -> None:
        """Remove a build directory: renamed away first, so its name never shows a half-deleted build."""
        if directory.exists():
            doomed = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=self.builds))
            directory.rename(doomed / "old")
            shutil.rmtree(doomed, ignore_errors=True)

    def _build(self, sha: str, key: BuildKey, directory: Path, on_step) -> Build:
        self.builds.mkdir(parents=True, exist_ok=True)
        for stale in self.builds.glob(f".{key.digest}.*"):  # left by a builder that died (we hold the key's lock)
            shutil.rmtree(stale, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key.digest}.", dir=self.builds))
        try:
            if on_step:
                on_step("export")
            build = Build(sha, key, staging, cached=False)
            export_inputs(self.repo, sha, key, build.source)
            status: dict[str, object] = {"status": "ok"}
            try:
                compile_tree(build.source, build.build_dir, on_step, env=isolated_env(self.builds))
            except BuildFailed as exc:
                if not exc.of_commit:
                    raise
                status = {"status": "build_failed", "reason": str(exc), "log_tail": exc.log_tail}
            status.update({"commit": sha, "inputs": list(key.inputs), "toolchain": key.toolchain})
            (staging / "status.json").write_text(json.dumps(status, indent=1))
            staging.rename(directory)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        if status["status"] != "ok":
            raise BuildFailed(str(status["reason"]), str(status["log_tail"]))
        return Build(sha, key, directory, cached=False)


def isolated_env(ceiling: Path) -> dict[str, str]:
    """This process's environment for a build under ``ceiling``: git finds no repository there (not
    the cache's own, nor one around it), so the build's ``git describe`` falls back."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CEILING_DIRECTORIES"] = str(ceiling.resolve())
    return env


def compile_tree(src: Path, build_dir: Path, on_step=None, env: dict[str, str] | None = None) -> Path:
    """meson setup (once per build directory) and ninja of a dataplane source tree.

    Returns the binary; raises :class:`BuildFailed` with the log tail. The full log is kept in
    ``build_dir/build.log``. ``env``: the build's environment (default: this process's).
    """
    build_dir.mkdir(parents=True, exist_ok=True)
    steps = [("compile", ["ninja", "-C", str(build_dir)])]
    if not (build_dir / "build.ninja").exists():  # afterwards ninja reconfigures by itself
        steps.insert(0, ("configure", ["meson", "setup", str(build_dir), str(src), *MESON_OPTIONS]))
    log: list[str] = []
    for step, cmd in steps:
        if on_step:
            on_step(step)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=1800, cwd=src.parent, env=env)
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
