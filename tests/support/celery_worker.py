"""``worker``: a real Celery worker process against the test Redis and this worker's database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from sqlalchemy import Engine

from .services import TEST_DATABASE_URL

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def worker(redis_url: str, committed: Engine, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], IO[Any]]]:
    """(the process, its log file open for reading): consumes the ``perfci`` queue until the test ends."""
    env = {
        **os.environ,
        "PERFCI_DATABASE_URL": TEST_DATABASE_URL,
        "PERFCI_BROKER_URL": redis_url,
        "PERFCI_ENV": "development",
        "PERFCI_DATA_DIR": str(tmp_path),
    }
    log = open(tmp_path / "worker.log", "w+")  # closed after the process stops
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "perfci_server.celery_app", "worker", "--pool=solo", "-Q", "perfci",
         "--loglevel=info", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    yield process, log
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    log.close()
