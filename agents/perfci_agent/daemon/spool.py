"""Result documents on disk until the server has acknowledged them.

A document is written here *before* its upload, so neither a crash nor an unreachable server
loses a measurement. One file per attempt, holding exactly the bytes to upload::

    spool/job-<job id>-attempt-<n>.json      waiting for upload (replayed at start)
    spool/rejected/<same name>               refused by the server for good (kept for a human)
    spool/rejected/<same name>.reason        why

Writes are atomic: a temporary file in the same directory, fsync, rename, fsync of the directory.
A half-written file is never mistaken for a document (temporary names do not match the pattern).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)
_NAME = re.compile(r"^job-(\d+)-attempt-(\d+)\.json$")
_TMP_PREFIX = ".tmp-"


@dataclass(frozen=True)
class Spooled:
    path: Path
    job_id: int
    attempt: int

    @property
    def body(self) -> bytes:
        return self.path.read_bytes()


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` so that a reader sees the old file or the new one, never a part."""
    tmp = path.parent / f"{_TMP_PREFIX}{path.name}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)  # the umask may have narrowed it; never widen beyond ``mode``
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


class Spool:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.rejected_dir = directory / "rejected"

    def ensure(self) -> None:
        self.rejected_dir.mkdir(parents=True, exist_ok=True, mode=0o700)

    def put(self, job_id: int, attempt: int, document: bytes) -> Spooled:
        self.ensure()
        path = self.directory / f"job-{job_id}-attempt-{attempt}.json"
        write_atomically(path, document)
        return Spooled(path, job_id, attempt)

    def pending(self) -> list[Spooled]:
        """Documents waiting for upload, oldest job first; stale temporary files are removed."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.iterdir():
            if path.name.startswith(_TMP_PREFIX):
                log.warning("spool: removing %s (an interrupted write; its document was never acknowledged)", path.name)
                path.unlink(missing_ok=True)
                continue
            m = _NAME.match(path.name)
            if m and path.is_file():
                found.append(Spooled(path, int(m.group(1)), int(m.group(2))))
            elif path.is_file():
                log.warning("spool: ignoring %s (not a spooled result)", path.name)
        return sorted(found, key=lambda s: (s.job_id, s.attempt))

    def done(self, item: Spooled) -> None:
        item.path.unlink(missing_ok=True)
        _fsync_dir(self.directory)

    def reject(self, item: Spooled, why: str) -> Path:
        """Move a document the server will never take out of the queue, with the reason beside it."""
        self.ensure()
        target = self.rejected_dir / item.path.name
        write_atomically(target.with_name(target.name + ".reason"), (why.rstrip() + "\n").encode())
        os.replace(item.path, target)
        _fsync_dir(self.directory)
        return target
