"""A scratch git history of the project's dataplane with known performance changes.

The demo (and anyone trying perfci) needs commits whose effect is known in advance: the history
starts from the committed `dataplane/` with regression (d) applied, removes it again later (an
improvement) and applies regression (a) after that; every other commit changes documentation only,
so its instruction counts equal its parent's.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

AUTHOR = ("Dana Plane", "dana@dataplane.example")
REGRESSIONS = Path("dataplane") / "regressions"


@dataclass(frozen=True)
class Step:
    subject: str
    change: Callable[[Path, Path], None]  # (scratch repo, source repo) -> edits the scratch tree
    effect: str = "none"  # "regression", "improvement" or "none": what the demo expects to see


@dataclass(frozen=True)
class MadeCommit:
    sha: str
    subject: str
    effect: str


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": AUTHOR[0], "GIT_AUTHOR_EMAIL": AUTHOR[1],
           "GIT_COMMITTER_NAME": AUTHOR[0], "GIT_COMMITTER_EMAIL": AUTHOR[1]}
    done = subprocess.run(["git", *args], cwd=repo, input=stdin, capture_output=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout.decode(errors="replace").strip()


def import_dataplane(repo: Path, source: Path) -> None:
    """The committed dataplane/ of the source repository (HEAD), not the working tree."""
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD", "dataplane"], cwd=source,
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(repo, filter="data")


def apply_patch(name: str, reverse: bool = False) -> Callable[[Path, Path], None]:
    def change(repo: Path, source: Path) -> None:
        patch = (source / REGRESSIONS / name).resolve()
        _git(repo, "apply", *(["--reverse"] if reverse else []), str(patch))
    return change


def append_line(path: str, line: str) -> Callable[[Path, Path], None]:
    def change(repo: Path, source: Path) -> None:
        with open(repo / path, "a") as f:
            f.write(line + "\n")
    return change


def _base(repo: Path, source: Path) -> None:
    import_dataplane(repo, source)
    apply_patch("d-helper-out-of-line.patch")(repo, source)


ROUTES = "dataplane/routes/example.txt"
README = "dataplane/README.md"

DEMO_STEPS: tuple[Step, ...] = (
    Step("dataplane: perfci-fwd, l3fwd-like IPv4 forwarding", _base),
    Step("routes: note that host routes use the tbl8 level", append_line(ROUTES, "# /32 routes live in tbl8 groups.")),
    Step("docs: how to run the self-fed harness", append_line(README, "\nRun `perfci-fwd --harness self` for pure forwarding cost.")),
    Step("fwd: inline the TTL helper again (a call per packet saved)", apply_patch("d-helper-out-of-line.patch", reverse=True), "improvement"),
    Step("docs: the drop counters, by reason", append_line(README, "\nDrops are counted per reason in the report.")),
    Step("routes: example of a default route", append_line(ROUTES, "# 0.0.0.0/0 is not allowed: lengths start at 1.")),
    Step("docs: hugepages are optional", append_line(README, "\n`--no-huge -m 512` runs without hugepages.")),
    Step("fwd: stage the rewritten MAC header in a vector descriptor", apply_patch("a-store-forward-block.patch"), "regression"),
    Step("docs: report fields", append_line(README, "\nThe JSON report names every drop reason.")),
    Step("routes: comment the private ranges", append_line(ROUTES, "# RFC 1918 ranges above.")),
    Step("docs: perf control FIFOs", append_line(README, "\n`--perf-ctl` gates perf stat to the measured window.")),
    Step("docs: idle mode", append_line(README, "\nIdle mode polls empty queues (the idle-poll calibration).")),
)


def make_history(repo: Path, source: Path, steps: tuple[Step, ...] = DEMO_STEPS, branch: str = "main",
                 on_commit: Callable[[MadeCommit], None] | None = None) -> list[MadeCommit]:
    """Create `repo` (must not exist) with one commit per step, oldest first."""
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", branch)
    made = []
    for step in steps:
        step.change(repo, source)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", step.subject)
        commit = MadeCommit(_git(repo, "rev-parse", "HEAD"), step.subject, step.effect)
        made.append(commit)
        if on_commit:
            on_commit(commit)
    return made
