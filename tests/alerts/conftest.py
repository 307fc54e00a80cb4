"""The alerts tests run on the server fixtures of :mod:`tests.support` (real PostgreSQL and Redis,
one rolled-back transaction per test, a real Celery worker where it matters); builders of measured
series are in :mod:`tests.alerts.alerts_support`."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated(isolated_settings: None) -> None:
    """Every test starts from development settings with no database or broker configured."""
