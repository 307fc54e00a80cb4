"""The alerts tests run on the server fixtures of :mod:`tests.support` (real PostgreSQL and Redis,
one rolled-back transaction per test, a real Celery worker where it matters); builders of measured
series are in :mod:`tests.alerts.alerts_support`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.alerts.alerts_support import Lab, committed_sim_lab
from tests.alerts.forge_server import ForgeServer
from tests.alerts.pull_world import TOKEN as WORLD_TOKEN
from tests.alerts.pull_world import World
from tests.server.git_forge import GitForge
from tests.support.server import settings_env

FORGE_TOKEN = "ghp_" + "x" * 36
STEP = 6  # the commit of the measured series (``lab``) where IPP rises 2.9 %


@pytest.fixture(autouse=True)
def _isolated(isolated_settings: None) -> None:
    """Every test starts from development settings with no database or broker configured."""


@pytest.fixture
def forge() -> Iterator[ForgeServer]:
    """A recording HTTP server standing in for the forge's API."""
    with ForgeServer() as server:
        yield server


@pytest.fixture
def lab(committed_client, sent_tasks, forge, monkeypatch) -> Iterator[Lab]:
    """A committed sim series of 10 commits (IPP +2.9 % from ``STEP``), measured and detected, whose
    verdicts post to ``forge``."""
    settings_env(monkeypatch, PERFCI_GITHUB_API_URL=forge.url, PERFCI_GITHUB_TOKEN=FORGE_TOKEN, PERFCI_FORGE_MAX_RETRIES="3",
                 PERFCI_PUBLIC_URL="https://perfci.example.com", PERFCI_FORGE_RESEND_INTERVAL_SECONDS="0.001")
    lab = committed_sim_lab(committed_client, sent_tasks, 10, STEP)
    yield lab
    lab.session.close()


@pytest.fixture
def world(committed_client, sent_tasks, tmp_path, monkeypatch) -> Iterator[World]:
    """A pull-request world (pull_world.py) with a git repository served to the mirror."""
    with ForgeServer() as forge:
        settings_env(monkeypatch, PERFCI_GITHUB_API_URL=forge.url, PERFCI_GITHUB_TOKEN=WORLD_TOKEN,
                     PERFCI_PUBLIC_URL="https://perfci.example.com", PERFCI_ALLOW_LOCAL_CLONE_URLS="true")  # file:// forge
        yield World(committed_client, sent_tasks, GitForge(tmp_path / "forge"), forge)
