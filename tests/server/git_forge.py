"""A git repository in a temporary directory standing in for a forge's repository (file:// clone
URL): commits made here are what a push brings, and the server's mirror fetches them for real."""

from __future__ import annotations

import http.server
import os
import subprocess
import threading
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


class HangingForge:
    """A forge over git's dumb HTTP protocol (the bare repository's files, served as they are)
    that can hang: while ``hanging`` is set it accepts every request and never answers."""

    def __init__(self, bare: Path) -> None:
        self.hanging = threading.Event()
        self.released = threading.Event()
        self.requests = 0
        forge = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=str(bare.parent), **kwargs)

            def do_GET(self) -> None:
                forge.requests += 1
                if forge.hanging.is_set():
                    forge.released.wait(60)  # until the test ends: the client gives up first
                    return
                super().do_GET()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/{bare.name}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()
