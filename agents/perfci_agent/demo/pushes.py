"""Signed GitHub push deliveries for commits of a local repository, shaped like the real ones."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

ZERO = "0" * 40


def _commit(repo: Path, sha: str) -> dict[str, Any]:
    fields = subprocess.run(["git", "show", "-s", "--format=%an%x00%ae%x00%aI%x00%B", sha], cwd=repo,
                            capture_output=True, text=True, errors="replace", check=True).stdout.split("\0")
    name, email, when, message = fields[0], fields[1], fields[2], fields[3].strip()
    return {"id": sha, "tree_id": "", "distinct": True, "message": message, "timestamp": when,
            "author": {"name": name, "email": email}, "committer": {"name": name, "email": email}}


def push_payload(repo: Path, full_name: str, branch: str, before: str | None, shas: list[str]) -> dict[str, Any]:
    """A `push` event for `shas` (oldest first) pushed onto `branch` whose previous head was `before`."""
    commits = [_commit(repo, sha) for sha in shas]
    owner, _, name = full_name.partition("/")
    return {
        "ref": f"refs/heads/{branch}", "before": before or ZERO, "after": shas[-1],
        "created": before is None, "deleted": False, "forced": False, "compare": "",
        "commits": commits, "head_commit": commits[-1],
        "repository": {"name": name, "full_name": full_name, "owner": {"name": owner, "login": owner}},
        "pusher": {"name": commits[-1]["author"]["name"], "email": commits[-1]["author"]["email"]},
    }


def signed(payload: dict[str, Any], secret: str, event: str = "push") -> tuple[bytes, dict[str, str]]:
    body = json.dumps(payload).encode()
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return body, {"Content-Type": "application/json", "X-GitHub-Event": event,
                  "X-GitHub-Delivery": str(uuid.uuid4()), "X-Hub-Signature-256": f"sha256={digest}"}
