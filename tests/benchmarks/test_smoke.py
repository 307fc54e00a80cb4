"""Every benchmark's ``--smoke`` mode runs and its premise holds: a benchmark whose measurement
stopped happening (a refused setup, no alert to time, no packet forwarded) fails here, not in a
figure someone quotes. The figures themselves are not asserted (tests never assert timings).

benchmarks/detection/ and benchmarks/compare/ have their own smoke tests beside this module.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.database import drop_database
from tests.support.services import WORKER, database_name, database_url

ROOT = Path(__file__).resolve().parents[2]
# Smoke modes take seconds of CPU; on a loaded 2-core host the builds and simulations take minutes.
pytestmark = pytest.mark.timeout(1800)


def smoke(script: str, *args: str, env: dict[str, str] | None = None, timeout: float = 1500) -> str:
    """Run ``benchmarks/<script> --smoke``; its output, or a failure with the tail of it."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--smoke", *args], cwd=ROOT,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{script} --smoke exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture
def bench_database(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database name of this test's own, for the benchmark to create (it refuses one it did not)."""
    name = database_name(WORKER, "bench", request.node.name.split("[")[0].removeprefix("test_")[:20])
    drop_database(name)
    yield database_url(name)
    drop_database(name)


@pytest.fixture
def bench_redis(redis_url: str) -> Iterator[str]:
    """The test Redis database, emptied before and after (a benchmark refuses one that holds keys)."""
    import redis

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield redis_url
    client.flushdb()
    client.close()


def test_bisect_smoke():
    out = smoke("bisect/run.py")
    assert "| deterministic, 2 % step | 8 |" in out and "opposed ranges" in out


@pytest.mark.services
def test_dashboards_smoke(bench_database):
    out = smoke("dashboards/run.py", "--database-url", bench_database)
    assert "slowest panel query" in out


@pytest.mark.services
def test_server_ingest_smoke(bench_database, bench_redis):
    out = smoke("server_ingest/run.py", "--database-url", bench_database, "--redis-url", bench_redis)
    assert "upload -> alert      p50" in out and "(n=2 groups" in out


@pytest.mark.services
def test_detection_task_smoke(bench_database, bench_redis):
    out = smoke("server_ingest/detection.py", "--database-url", bench_database, "--redis-url", bench_redis)
    assert "backlog: one detection of" in out


@pytest.mark.services
def test_forge_smoke(bench_database, bench_redis):
    out = smoke("forge/run.py", env={"PERFCI_BENCH_DATABASE_URL": bench_database, "PERFCI_BENCH_REDIS_URL": bench_redis})
    assert "push -> status" in out


@pytest.mark.services
@pytest.mark.dataplane
def test_team_day_smoke(bench_database, bench_redis):
    """The short team day on a real Gitea: every score 0 (the script exits 1 otherwise), a regression alerted."""
    if not os.environ.get("PERFCI_GITEA_BIN"):
        pytest.fail("PERFCI_GITEA_BIN is not set: build Gitea with `bash .ci/gitea` and export PERFCI_GITEA_BIN=<the path it prints>",
                    pytrace=False)
    out = smoke("forge/team.py", env={"PERFCI_BENCH_DATABASE_URL": bench_database, "PERFCI_BENCH_REDIS_URL": bench_redis})
    assert "scores (each should be 0)" in out and "pull request -> verdict" in out


@pytest.mark.dataplane
@pytest.mark.xdist_group("dataplane")  # it builds into dataplane/build, as fwd_bin may
def test_dataplane_smoke():
    out = smoke("dataplane/run.py")
    assert "a dropped packet costs" in out


@pytest.mark.dataplane
@pytest.mark.xdist_group("dataplane")
def test_dataplane_timed_checks_smoke():
    out = smoke("dataplane/timed_checks.py")
    assert "1. task-clock / window" in out


@pytest.mark.dataplane
@pytest.mark.xdist_group("memhazard")
def test_hazards_smoke():
    out = smoke("hazards/run.py")
    assert "| baseline | 1 |" in out


@pytest.mark.dataplane
@pytest.mark.xdist_group("memhazard")
def test_measure_smoke(tmp_path):
    out = smoke("measure/run.py", "--cache-dir", str(tmp_path / "cache"))
    assert "identical" in out
