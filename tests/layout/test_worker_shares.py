"""Each xdist worker has its own Redis database and forwarding CPU (tests/support/services.py)."""

import pytest

from tests.support.services import worker_redis_url


def test_worker_i_uses_the_redis_database_i_below_the_named_one():
    assert [worker_redis_url("redis://127.0.0.1:6379/15", i) for i in range(3)] == [
        "redis://127.0.0.1:6379/15", "redis://127.0.0.1:6379/14", "redis://127.0.0.1:6379/13"]
    assert worker_redis_url("redis://:secret@10.0.0.1:6380/3", 1) == "redis://:secret@10.0.0.1:6380/2"


def test_too_low_a_database_for_the_workers_is_refused():
    with pytest.raises(pytest.UsageError, match="would need Redis database -1"):
        worker_redis_url("redis://127.0.0.1:6379/0", 1)
