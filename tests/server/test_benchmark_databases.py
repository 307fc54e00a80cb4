"""The benchmarks drop and recreate only databases a benchmark created (benchmarks/owned.py), and
empty only a Redis database no one else uses."""

from __future__ import annotations

import psycopg
import pytest
import redis
from sqlalchemy.engine import make_url

from benchmarks import owned
from benchmarks.server_ingest import detection, run
from tests.support.services import TEST_DATABASE_URL, TEST_REDIS_URL

pytestmark = pytest.mark.services


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def test_the_defaults_are_the_benchmarks_own():
    for name in ("ingest", "dash"):
        assert make_url(owned.default_database_url(name)).database == f"perfci_bench_{name}"
    assert owned.default_redis_url() != TEST_REDIS_URL


def test_a_database_a_benchmark_did_not_create_is_refused_and_kept(pg_engine):
    with pytest.raises(owned.NotOurs, match="refusing to drop"):
        owned.recreate_database(TEST_DATABASE_URL)
    with psycopg.connect(_libpq(TEST_DATABASE_URL)) as conn:  # still there, untouched
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_benchmark_database_is_recreated_empty(pg_engine):
    url = make_url(TEST_DATABASE_URL).set(database=f"{make_url(TEST_DATABASE_URL).database}_owned_check")
    rendered = url.render_as_string(hide_password=False)
    try:
        owned.recreate_database(rendered)
        with psycopg.connect(_libpq(rendered), autocommit=True) as conn:
            conn.execute("CREATE TABLE leftover (x int)")
        owned.recreate_database(rendered)  # ours: dropped and created again
        with psycopg.connect(_libpq(rendered)) as conn:
            assert conn.execute("SELECT to_regclass('leftover')").fetchone() == (None,)
    finally:
        with psycopg.connect(_libpq(TEST_DATABASE_URL), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{url.database}" WITH (FORCE)')


def test_a_redis_database_in_other_use_is_refused():
    client = redis.Redis.from_url(TEST_REDIS_URL)
    client.set("someone-elses-key", "1")
    try:
        with pytest.raises(owned.NotOurs, match="refusing Redis"):
            owned.claim_redis(TEST_REDIS_URL)
        assert client.get("someone-elses-key") == b"1" and not client.exists(owned.REDIS_MARK)
    finally:
        client.delete("someone-elses-key")


def test_the_detection_benchmark_has_its_own_database():
    assert make_url(detection.DEFAULT_DB).database == "perfci_bench_detection"


def test_the_ingest_benchmark_prints_the_machine_and_postgresql_state_it_ran_on(pg_engine):
    settings = run._postgres_settings(TEST_DATABASE_URL)  # read from the server, not assumed
    for name in ("fsync=", "synchronous_commit=", "shared_buffers=", "max_connections="):
        assert name in settings
    report = run.MachineState().report()
    assert "load average" in report and "steal" in report and "cores" in report


def test_paced_arrivals_follow_the_schedule_and_count_the_late_ones():
    pace = run.Pace(rate=1000.0)
    pace.t0 = 0.0  # long past: every slot is already due, so every cycle is late
    for _ in range(5):
        pace.wait()
    assert pace.k == 5 and len(pace.late) == 5
    assert pace.late == sorted(pace.late, reverse=True)  # slot k is due at k / rate: later slots are less late
