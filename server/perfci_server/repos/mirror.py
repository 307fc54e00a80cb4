"""The server's bare mirror of each repository: what a push really contains, with real parents.

Forges list at most 20 commits in a push payload and no parents; git knows both. One bare
repository per registered repository under ``<data_dir>/mirrors/<id>.git``, fetched (branches and
tags) when a push arrives; a file lock keeps two fetches of one mirror apart.

Credentials: http(s) clone URLs on the forge's own host (scheme, host and port of its API URL)
are fetched with the forge token from the settings, as the user the forge's record names
(:mod:`..forge.registry`), passed to git in its environment, never on a command line, scoped to
that host, without following redirects; ssh URLs with ``mirror_ssh_key_file``. git never prompts.
"""

from __future__ import annotations

import base64
import ctypes
import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

from .. import dispatch
from ..forge.kind import base_of
from ..forge.registry import kind_of
from ..models import Repository
from ..settings import Settings

_FIELDS = "%H%x1f%P%x1f%an%x1f%ae%x1f%cI%x1f%B%x1e"


class MirrorUnavailable(Exception):
    """The mirror could not be fetched (or lacks the pushed commit); the message says why."""


class ForgeBusy(MirrorUnavailable):
    """Every fetch slot of the forge's host is taken (it may hang): nothing was tried; come back soon."""

    retry_seconds = 2.0


@dataclass(frozen=True)
class GitCommit:
    sha: str
    parents: list[str]
    author_name: str
    author_email: str
    committed_at: datetime | None
    message: str


def mirror_path(settings: Settings, repository_id: int) -> Path:
    return (settings.data_dir / "mirrors" / f"{repository_id}.git").resolve()


def fetch(settings: Settings, repository: Repository, want: str, timeout: float) -> Path:
    """Bring the mirror up to date (creating it on first use) so that it has commit ``want``.

    A worker never waits on another one's fetch: with every fetch slot of the forge's host taken,
    or another fetch of this mirror running for longer than a moment, it raises ForgeBusy having
    done nothing (its task comes back shortly), so a forge that hangs holds at most
    ``fetches_per_forge_host`` workers."""
    path = mirror_path(settings, repository.id)
    path.parent.mkdir(parents=True, exist_ok=True)
    if (path / "HEAD").exists() and has_commit(path, want):
        return path
    host = host_of(repository.clone_url)
    with dispatch.slot(f"fetch:{host}", settings.fetches_per_forge_host, timeout + 30) as free:
        if not free:
            raise ForgeBusy(f"every fetch slot of {host} is taken (PERFCI_FETCHES_PER_FORGE_HOST)")
        with _locked(path.with_suffix(".lock"), min(timeout, LOCK_WAIT_SECONDS)):
            if not (path / "HEAD").exists():
                _git(None, "init", "--quiet", "--bare", str(path), timeout=timeout)
            if not has_commit(path, want):
                # Besides branches and tags, the pull requests' heads: a fork's head is in the mirror too.
                _git(path, "fetch", "--quiet", "--no-tags", "--", repository.clone_url,
                     "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*", kind_of(repository.forge).pull_refspec,
                     timeout=timeout, env=_credentials(settings, repository))
    if not has_commit(path, want):
        raise MirrorUnavailable(f"{repository.clone_url} has no commit {want} on any branch or tag")
    return path


LOCK_WAIT_SECONDS = 5.0  # another fetch of the same mirror: wait this long for it, then come back later


def host_of(url: str) -> str:
    """The host a clone URL fetches from (scp-like ``user@host:path`` included)."""
    if "://" in url:
        parts = urlsplit(url)
        if not parts.hostname:  # file:// URLs: this machine's file system
            return "this host's file system"
        return f"{parts.hostname}:{parts.port}" if parts.port else parts.hostname
    return url.split("@", 1)[-1].split(":", 1)[0]


def has_commit(path: Path, sha: str) -> bool:
    r = subprocess.run(["git", "-C", str(path), "cat-file", "-e", f"{sha}^{{commit}}"], capture_output=True, timeout=60)
    return r.returncode == 0


def merge_base(path: Path, a: str, b: str) -> str | None:
    """The best common ancestor of two commits, or None when they share no history."""
    r = subprocess.run(["git", "-C", str(path), "merge-base", a, b], capture_output=True, text=True, errors="replace", timeout=120)
    return r.stdout.strip() or None if r.returncode == 0 else None


def depth(path: Path, sha: str) -> int:
    """How many commits ``sha`` has in its history (itself included): of two merge-bases on one
    line, the newer one has more."""
    r = subprocess.run(["git", "-C", str(path), "rev-list", "--count", sha], capture_output=True, text=True, errors="replace",
                       timeout=120)
    return int(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip().isdigit() else 0


def is_ancestor(path: Path, ancestor: str, descendant: str) -> bool:
    r = subprocess.run(["git", "-C", str(path), "merge-base", "--is-ancestor", ancestor, descendant], capture_output=True, timeout=120)
    return r.returncode == 0


def first_parent_commits(path: Path, after: str, exclude: Sequence[str], limit: int) -> list[GitCommit]:
    """The first-parent chain from ``after`` back to (not including) anything reachable from
    ``exclude``, oldest first; at most the newest ``limit``. Excluded names the mirror lacks are
    ignored (a branch head force-pushed away)."""
    out = _git(path, "log", "--first-parent", "--reverse", f"--max-count={limit}", f"--format={_FIELDS}",
               "--ignore-missing", after, "--not", *exclude, "--", timeout=120)
    commits = []
    for record in out.split("\x1e"):
        record = record.lstrip("\n")
        if not record:
            continue
        sha, parents, name, email, date, message = record.split("\x1f", 5)
        commits.append(GitCommit(sha, parents.split(), name, email, datetime.fromisoformat(date) if date else None, message))
    return commits


def patch_ids(path: Path, shas: Sequence[str], timeout: float = 120) -> dict[str, str]:
    """git's stable patch id of each commit with one parent: the same change under another sha (a
    cherry-pick, a rebase without conflicts) has the same id. Merges and empty commits get none."""
    if not shas:
        return {}
    diff = subprocess.run(["git", "-C", str(path), "show", "--no-color", "--format=commit %H", "-p", *shas],
                          capture_output=True, timeout=timeout)
    if diff.returncode != 0:
        raise MirrorUnavailable(f"git show failed: {diff.stderr.decode(errors='replace').strip()[-500:]}")
    ids = subprocess.run(["git", "-C", str(path), "patch-id", "--stable"], input=diff.stdout, capture_output=True, timeout=timeout)
    out = {}
    for line in ids.stdout.decode(errors="replace").splitlines():
        patch, _, commit = line.partition(" ")
        out[commit] = patch
    return out


def _git(path: Path | None, *args: str, timeout: float, env: dict[str, str] | None = None) -> str:
    """Run git with no prompt, in a process group of its own that dies with it: on the timeout the
    whole group is killed (git and its remote helper), and a worker that is killed takes git with it
    (the parent-death signal); a transfer that stalls gives up after the timeout on its own
    (``http.lowSpeedTime``). Its output is read as UTF-8, undecodable bytes replaced."""
    low_speed = ["-c", "http.lowSpeedLimit=1", "-c", f"http.lowSpeedTime={max(1, int(timeout))}"]
    command = ["git", *low_speed, *(["-C", str(path)] if path else []), *args]
    full_env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", **(env or {})}
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env,
                                   start_new_session=True, preexec_fn=_die_with_parent)
    except OSError as exc:
        raise MirrorUnavailable(f"git cannot run: {exc}") from None
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        raise MirrorUnavailable(f"git {args[0]} took longer than {timeout:g} s") from None
    except BaseException:  # the task itself is being stopped: git goes with it
        _kill_group(process)
        raise
    if process.returncode != 0:
        message = err.decode("utf-8", errors="replace").strip()[-500:]
        raise MirrorUnavailable(f"git {args[0]} failed: {message or process.returncode}")
    return out.decode("utf-8", errors="replace")


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.communicate()


_PR_SET_PDEATHSIG = 1
try:  # looked up here, not in the child: a forked child of a threaded process must not load libraries
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (AttributeError, OSError):  # not Linux: the timeout still bounds git
    _PRCTL = None


def _die_with_parent() -> None:
    """In the child, before git starts: SIGKILL it when the process that started it dies (Linux)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


@contextmanager
def _locked(lock_file: Path, timeout: float) -> Iterator[None]:
    deadline = time.monotonic() + timeout
    with open(lock_file, "a") as fh:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ForgeBusy("another fetch of this mirror is still running") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _credentials(settings: Settings, repository: Repository) -> dict[str, str]:
    """git environment that authenticates the fetch, when the settings hold a credential for it.

    The forge token is scoped to the forge's base URL (``http.<base>/.extraHeader``: scheme, host
    and port) and the fetch does not follow redirects. The second is what keeps a forge that
    answers 302 to another host from handing that host the token: git matches the scope against
    the URL it was given, then moves its base URL to the redirect's target and sends the header
    with every later request there (tests/server/test_mirror_credentials.py shows both)."""
    env: dict[str, str] = {}
    url = repository.clone_url
    if settings.mirror_ssh_key_file and (url.startswith("ssh://") or ("@" in url and "://" not in url)):
        env["GIT_SSH_COMMAND"] = f"ssh -i {settings.mirror_ssh_key_file} -o IdentitiesOnly=yes -o BatchMode=yes"
    elif url.startswith(("https://", "http://")):
        kind = kind_of(repository.forge)
        token, base = kind.token(settings), kind.git_base(kind.api_url(settings))
        if token is not None and base_of(url) == base:  # never send a token to another host
            basic = base64.b64encode(f"{kind.git_user}:{token}".encode()).decode()
            env.update({"GIT_CONFIG_COUNT": "2",
                        "GIT_CONFIG_KEY_0": f"http.{base}/.extraHeader", "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
                        "GIT_CONFIG_KEY_1": "http.followRedirects", "GIT_CONFIG_VALUE_1": "false"})
    else:
        env["GIT_SSH_COMMAND"] = "ssh -o BatchMode=yes"
    return env
