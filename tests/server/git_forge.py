"""A git repository in a temporary directory standing in for a forge's repository (file:// clone
URL): commits made here are what a push brings, and the server's mirror fetches them for real."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any


class GitForge:
    """A git repository standing in for GitHub/GitLab: commits made here are what a push brings."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._n = 0
        path.mkdir(parents=True)
        self.git("init", "--quiet", "--initial-branch=main")

    def git(self, *args: str) -> str:
        env = {**os.environ, "GIT_AUTHOR_NAME": "Ada Lovelace", "GIT_AUTHOR_EMAIL": "ada@example.com",
               "GIT_COMMITTER_NAME": "Ada Lovelace", "GIT_COMMITTER_EMAIL": "ada@example.com",
               "GIT_AUTHOR_DATE": f"2026-11-01T10:{self._n // 60:02d}:{self._n % 60:02d}Z",
               "GIT_COMMITTER_DATE": f"2026-11-01T10:{self._n // 60:02d}:{self._n % 60:02d}Z"}
        return subprocess.run(["git", "-C", str(self.path), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()

    def commit(self, n: int, subject: str = "fwd: change") -> list[str]:
        shas = []
        for _ in range(n):
            self._n += 1
            self.git("commit", "--quiet", "--allow-empty", "-m", f"{subject} {self._n}")
            shas.append(self.git("rev-parse", "HEAD"))
        return shas

    def head(self) -> str:
        return self.git("rev-parse", "HEAD")

    def forge_commit(self, sha: str) -> dict[str, Any]:
        message, date = self.git("log", "-1", "--format=%B%x1f%cI", sha).split("\x1f")
        return {"id": sha, "tree_id": self.git("rev-parse", f"{sha}^{{tree}}"), "distinct": True, "message": message.strip(),
                "timestamp": date, "url": f"https://github.com/perfci-org/dataplane/commit/{sha}",
                "author": {"name": "Ada Lovelace", "email": "ada@example.com", "username": "ada"},
                "committer": {"name": "Ada Lovelace", "email": "ada@example.com", "username": "ada"},
                "added": [], "removed": [], "modified": ["dataplane/src/fwd.c"]}
