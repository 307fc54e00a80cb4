"""Fixtures of the bisect tests: the real 16-commit repository (:mod:`tests.bisect.bisect_repo`),
made once per session; the database, Redis and Celery worker come from :mod:`tests.support`."""

from __future__ import annotations

import pytest

from tests.bisect.bisect_repo import make_repository


@pytest.fixture(autouse=True)
def _isolated(isolated_settings: None) -> None:
    """Every test starts from development settings with no database or broker configured."""


@pytest.fixture(scope="session")
def bisect_repo(tmp_path_factory) -> dict:
    repo = tmp_path_factory.mktemp("bisect") / "repo"
    shas = make_repository(repo)
    return {"repo": repo, "shas": shas, "cache": tmp_path_factory.mktemp("bisect-cache")}
