"""The commits a bisection walks: ``good``, then the first-parent commits up to ``bad``."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..workspace import resolve_commit

_FORMAT = "%H%x1f%an%x1f%ae%x1f%cI%x1f%s"


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    author: str
    email: str
    date: str
    subject: str

    def to_dict(self) -> dict[str, str]:
        return {"sha": self.sha, "author": self.author, "email": self.email, "date": self.date, "subject": self.subject}


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, errors="replace", timeout=120)


def _info(line: str) -> CommitInfo:
    sha, author, email, date, subject = line.split("\x1f", 4)
    return CommitInfo(sha, author, email, date, subject)


def commit_range(repo: Path, good: str, bad: str) -> list[CommitInfo]:
    """``good`` followed by every first-parent commit after it up to and including ``bad``.

    Raises UsageError when a revision is unknown, when good is not an ancestor of bad, or when
    they are the same commit (nothing to bisect).
    """
    good_sha, bad_sha = resolve_commit(repo, good), resolve_commit(repo, bad)
    if good_sha == bad_sha:
        raise UsageError(f"good and bad are the same commit ({good_sha[:12]}): nothing to bisect")
    if _git(repo, "merge-base", "--is-ancestor", good_sha, bad_sha).returncode != 0:
        raise UsageError(f"good {good} ({good_sha[:12]}) is not an ancestor of bad {bad} ({bad_sha[:12]})")
    listed = _git(repo, "log", "--first-parent", "--reverse", f"--format={_FORMAT}", f"{good_sha}..{bad_sha}")
    head = _git(repo, "log", "-1", f"--format={_FORMAT}", good_sha)
    if listed.returncode != 0 or head.returncode != 0:
        raise UsageError(f"git log failed: {(listed.stderr or head.stderr).strip()}")
    commits = [_info(head.stdout.strip())] + [_info(line) for line in listed.stdout.splitlines() if line]
    if commits[-1].sha != bad_sha:
        # good is an ancestor, but only through a merged side branch: first-parent order skips it
        raise UsageError(f"good {good_sha[:12]} is not on the first-parent history of bad {bad_sha[:12]}")
    return commits
