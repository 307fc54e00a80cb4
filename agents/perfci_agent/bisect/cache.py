"""Results measured locally, reused by later bisections on the same machine.

One JSON result document per measurement (``perfci measure --json``), filed under

    <cache dir>/results/<machine_id>/<config>/<backend>/<sha>/<n>.json

A build failure is cached like any result (the commit will not build next time either); run
failures are not (they may be transient). Documents that no longer parse are ignored, not fatal.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from pydantic import ValidationError

from perfci_core.result import ResultDocument

log = logging.getLogger(__name__)


class ResultCache:
    def __init__(self, root: Path) -> None:
        self.root = root / "results"

    def _dir(self, machine_id: str, config: str, backend: str, sha: str) -> Path:
        return self.root / machine_id / config / backend / sha

    def load(self, machine_id: str, config: str, backend: str, sha: str) -> list[tuple[Path, ResultDocument]]:
        folder = self._dir(machine_id, config, backend, sha)
        docs = []
        for path in sorted(folder.glob("*.json"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1):
            try:
                docs.append((path, ResultDocument.model_validate_json(path.read_bytes())))
            except (ValidationError, ValueError, OSError) as exc:
                log.warning("ignoring unreadable cached result %s: %s", path, exc)
        return docs

    def store(self, config: str, doc: ResultDocument) -> Path | None:
        if doc.status == "run_failed":
            return None
        folder = self._dir(doc.machine_id, config, doc.backend.value, doc.commit)
        folder.mkdir(parents=True, exist_ok=True)
        n = len(list(folder.glob("*.json")))
        path = folder / f"{n}.json"
        tmp = folder / f".{n}.json.tmp"
        tmp.write_text(doc.model_dump_json(by_alias=True))
        os.replace(tmp, path)  # never a half-written document
        return path
