"""One cached build of ``dataplane/`` per source tree (docs/operations.md, "Running an agent").

    builds/<key>/                   a finished build, renamed into place whole (built or failed)
    builds/<key>/inputs/dataplane/  its build inputs, exported from git: all of the repository it sees
    builds/<key>/build/             meson build directory: ``perfci-fwd``, ``build.log``
    builds/<key>/status.json        ok or build_failed (reason, log tail), the commit, inputs, toolchain
    trees/<digest>/dataplane/       a commit's build inputs and run data: its runs' working directory
    .<name>.XXXXXXXX/               under way;  locks/<name>.lock: one writer per key

``<key>`` (:func:`build_key`): sha256 of the git entries (mode, object id, path) of every file of
``dataplane/`` but :data:`NOT_READ` (documentation, regression patches) and :data:`RUN_DATA` (routes
files, which runs read), and of the toolchain (:func:`toolchain`), which the cache outlives. Listing
what is left out rather than the inputs keeps a new header folder in the key unasked. With no git
repository around the export, a build that reads a left-out file fails rather than depending on it
unseen, and ``git describe`` (the embedded build id) gives ``unknown`` for every commit of a key.
Only the commit's own failures are recorded; a build that could not run here (a tool missing, a
timeout) is tried again. Readers need no lock. The cache directory is made absolute once
(:func:`cache_root`). ``builds/<sha>/`` and ``worktrees/<sha>/`` of an older perfci (40-hex
names; keys have 64) are never read.
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
# Paths under dataplane/ (fnmatch; `*` also matches `/`) that neither the build nor the runs read:
# documentation, and the regression patches (tests and the demo apply them to src/).
NOT_READ = ("*.md", "regressions/*")
# Read by the runs (a config names its routes file relative to dataplane/), not by the build.
RUN_DATA = ("routes/*",)
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


def _matches(path: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch(path, pattern) for pattern in patterns)


def _path(entry: str) -> str:
    return entry.split("\t", 1)[1]


@dataclass(frozen=True)
class Sources:
    """A commit's ``dataplane/`` as git stores it, without what neither its build nor its runs read."""

    sha: str
    entries: tuple[str, ...]  # "<mode> <type> <object>\t<path relative to dataplane/>", git's order

    @property
    def build_inputs(self) -> tuple[str, ...]:
        return tuple(e for e in self.entries if not _matches(_path(e), RUN_DATA))

    @property
    def digest(self) -> str:
        """The run tree's directory name: equal for commits whose build inputs and run data are."""
        return hashlib.sha256(json.dumps({"schema": KEY_SCHEMA, "tree": self.entries}).encode()).hexdigest()

    def blob(self, path: str) -> str | None:
        """The object id of the regular file at ``path`` (relative to dataplane/), None when there is none."""
        return next((e.split(" ", 2)[2].split("\t", 1)[0] for e in self.entries
                     if _path(e) == path and e.startswith(("100644 blob ", "100755 blob "))), None)


def sources(repo: Path, sha: str) -> Sources:
    """What the build and the runs of ``sha`` read; :class:`BuildFailed` (the commit's own) when the
    commit has no ``dataplane/meson.build``."""
    r = _git(repo, "ls-tree", "-r", "-z", sha, "--", f"{SOURCE}/", check=False)
    if r.returncode != 0:
        raise UsageError(f"cannot list {SOURCE}/ of {sha[:12]}: {r.stderr.strip()}")
    entries = []
    for entry in filter(None, r.stdout.split("\0")):
        meta, path = entry.split("\t", 1)
        relative = path.removeprefix(f"{SOURCE}/")
        if not _matches(relative, NOT_READ):
            entries.append(f"{meta}\t{relative}")
    if not any(_path(e) == "meson.build" for e in entries):
        raise BuildFailed(f"no {SOURCE}/meson.build at this commit", "")
    return Sources(sha, tuple(entries))


@dataclass(frozen=True)
class BuildKey:
    digest: str  # sha256 hex: the build's directory name
    inputs: tuple[str, ...]  # the build inputs' entries (Sources.build_inputs)
    toolchain: dict[str, str | None] = field(compare=False)

    @property
    def build_id(self) -> str:
        """The result document's ``build_id``: which binary was measured."""
        return f"{self.digest[:16]}-release"


def build_key(src: Sources, tools: dict[str, str | None] | None = None) -> BuildKey:
    """The key of the build of ``src``: its build inputs and the toolchain."""
    tools = toolchain() if tools is None else tools
    material = json.dumps({"schema": KEY_SCHEMA, "inputs": src.build_inputs, "toolchain": tools}, sort_keys=True)
    return BuildKey(hashlib.sha256(material.encode()).hexdigest(), src.build_inputs, tools)


def export(repo: Path, sha: str, entries: tuple[str, ...], dest: Path) -> None:
    """Write the files ``entries`` name of ``sha``'s ``dataplane/`` (and nothing else of it) into ``dest``."""
    wanted = {_path(e) for e in entries}
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
    files = {_path(e) for e in entries if e.split(" ", 2)[1] == "blob"}
    if files - written:
        raise BuildFailed(f"the export of {sha[:12]} lacks {', '.join(sorted(files - written)[:5])}", "", of_commit=False)


@dataclass(frozen=True)
class Build:
    sha: str  # the commit asked for (the build may have been made for another commit of the same key)
    key: BuildKey
    sources: Sources
    directory: Path  # builds/<key>
    tree: Path  # trees/<Sources.digest>
    cached: bool

    @property
    def build_dir(self) -> Path:
        return self.directory / "build"

    @property
    def binary(self) -> Path:
        return self.build_dir / BINARY

    @property
    def source(self) -> Path:
        """This commit's ``dataplane/`` as its runs see it (build inputs and run data): their working
        directory, where a config's routes file is found."""
        return self.tree / SOURCE


def cache_root(repo: Path, cache_dir: str | Path | None = None) -> Path:
    """The cache directory, absolute (a relative one is taken from the current directory);
    default ``<repo>/.perfci``."""
    return (Path(cache_dir).expanduser() if cache_dir else repo / ".perfci").resolve()


class Workspace:
    def __init__(self, repo: Path, cache_dir: str | Path | None = None) -> None:
        self.repo = repo
        self.cache_dir = cache_root(repo, cache_dir)
        self.builds = self.cache_dir / "builds"
        self.trees = self.cache_dir / "trees"
        self._tools: dict[str, str | None] | None = None

    def key(self, sha: str) -> BuildKey:
        """The build key of ``sha`` (the toolchain is read once per workspace)."""
        return self._key(sources(self.repo, sha))

    def _key(self, src: Sources) -> BuildKey:
        if self._tools is None:
            self._tools = toolchain()
        return build_key(src, self._tools)

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
        """The built dataplane of ``sha``'s build key, with ``sha``'s run tree; raises
        :class:`BuildFailed` with the log tail. ``rebuild``: forget the key's build or failure and
        build again."""
        src = sources(self.repo, sha)
        key = self._key(src)
        directory = self.builds / key.digest
        cached = not rebuild and self._built(directory)
        if not cached:
            with self._lock(key.digest):
                cached = not rebuild and self._built(directory)  # another process may have built it meanwhile
                if not cached:
                    self._discard(directory)
                    self._build(src, key, directory, on_step)
        return Build(sha, key, src, directory, self._tree(src), cached)

    def _built(self, directory: Path) -> bool:
        """Whether the key is built (raises its recorded failure); a damaged build counts as none."""
        try:
            status = json.loads((directory / "status.json").read_text())
        except (OSError, ValueError):
            return False
        if status.get("status") == "build_failed":
            raise BuildFailed(status.get("reason", "build failed"), status.get("log_tail", ""))
        return status.get("status") == "ok" and (directory / "build" / BINARY).exists()

    def _staging(self, parent: Path, name: str) -> Path:
        """A fresh hidden directory for ``parent/name``, after removing what a process that died
        left there (the caller holds ``name``'s lock)."""
        parent.mkdir(parents=True, exist_ok=True)
        for stale in parent.glob(f".{name}.*"):
            shutil.rmtree(stale, ignore_errors=True)
        return Path(tempfile.mkdtemp(prefix=f".{name}.", dir=parent))

    def _discard(self, directory: Path) -> None:
        """Remove a build directory: renamed away first, so its name never shows a half-deleted build."""
        if directory.exists():
            doomed = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
            directory.rename(doomed / "old")
            shutil.rmtree(doomed, ignore_errors=True)

    def _build(self, src: Sources, key: BuildKey, directory: Path, on_step) -> None:
        """Build ``key`` from ``src``'s build inputs alone and put the result (or the commit's failure,
        then raised) in ``directory`` whole."""
        staging = self._staging(self.builds, key.digest)
        try:
            if on_step:
                on_step("export")
            inputs = staging / "inputs" / SOURCE
            export(self.repo, src.sha, key.inputs, inputs)
            status: dict[str, object] = {"status": "ok"}
            try:
                compile_tree(inputs, staging / "build", on_step, env=self.build_env())
            except BuildFailed as exc:
                if not exc.of_commit:
                    raise
                status = {"status": "build_failed", "reason": str(exc), "log_tail": exc.log_tail}
            status.update({"commit": src.sha, "inputs": list(key.inputs), "toolchain": key.toolchain})
            (staging / "status.json").write_text(json.dumps(status, indent=1))
            staging.rename(directory)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        if status["status"] != "ok":
            raise BuildFailed(str(status["reason"]), str(status["log_tail"]))

    def build_env(self) -> dict[str, str]:
        """The builds' environment: git finds no repository around them (:func:`isolated_env`), and
        ccache keeps its objects in ``ccache/`` of this cache unless ``CCACHE_DIR`` names a shared one."""
        env = isolated_env(self.builds)
        env.setdefault("CCACHE_DIR", str(self.cache_dir / "ccache"))
        return env

    def _tree(self, src: Sources) -> Path:
        """``trees/<digest>``: ``src``'s build inputs and run data, exported once."""
        tree = self.trees / src.digest
        if not (tree / SOURCE).is_dir():
            with self._lock(f"tree-{src.digest}"):
                if not (tree / SOURCE).is_dir():
                    staging = self._staging(self.trees, src.digest)
                    try:
                        export(self.repo, src.sha, src.entries, staging / SOURCE)
                        staging.rename(tree)
                    except BaseException:
                        shutil.rmtree(staging, ignore_errors=True)
                        raise
        return tree


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

    meson compiles through ccache when it is installed. Every build has a directory of its own, and
    the compile commands name sources relative to it, so ccache is told to leave the directory out
    of its hash (``CCACHE_NOHASHDIR``): a tree that changes one file recompiles that file and takes
    the others' objects. Their code is the compiler's own output for the same source and flags; only
    the build directory recorded in their debug information may be another build's.
    """
    env = dict(os.environ if env is None else env)
    env.setdefault("CCACHE_NOHASHDIR", "1")
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
