"""The memhazard tool, built once per test session into a scratch cache (every pattern test runs it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfci_agent.hazards import memhazard_lib


@pytest.fixture(scope="session")
def tool_lib(tmp_path_factory) -> Path:
    return memhazard_lib(tmp_path_factory.mktemp("memhazard-cache"))
