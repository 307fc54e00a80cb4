"""Fixture plugins shared by every test directory, registered by ``tests/conftest.py``.

- :mod:`tests.support.services`: where the test PostgreSQL and Redis are, per xdist worker.
- :mod:`tests.support.database`: one migrated template database per run, a clone of it per
  worker (``pg_engine``), rolled-back sessions and committed tests, fresh clones for process stacks.
- :mod:`tests.support.server`: the app over the test database (``client``, ``committed_client``),
  recorded task sends (``sent_tasks``), the settings every server test starts from, Redis.
- :mod:`tests.support.celery_worker`: a real Celery worker process (``worker``).
- :mod:`tests.support.gitea`: one real Gitea per worker (``gitea``).
- :mod:`tests.support.groups`: which tests share one xdist worker.
"""
