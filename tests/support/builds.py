"""The tests' dataplane builds share one ccache: ``CCACHE_DIR`` when set, else the user's own
(``ccache -k cache_dir``). Every agent a test starts has a cache directory of its own, which the
agent's ccache would otherwise live in (``Workspace.build_env``); shared, a tree's unchanged files
compile once per run, for both xdist workers."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if "CCACHE_DIR" in os.environ or not shutil.which("ccache"):
        return
    found = subprocess.run(["ccache", "-k", "cache_dir"], capture_output=True, text=True, check=True).stdout.strip()
    os.environ["CCACHE_DIR"] = found
