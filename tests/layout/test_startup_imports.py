"""The processes that start often (the API, a worker with its task modules, the agent daemon) start
without scipy, which takes about a second of CPU to import: the statistical functions of
perfci_core.analysis import it when they run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from perfci_server.celery_app import TASK_MODULES

IMPORT_AND_LIST_SCIPY = """
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(sorted(m for m in sys.modules if m.split(".")[0] == "scipy"))
"""


@pytest.mark.parametrize("modules", [
    ["perfci_server.app"],
    ["perfci_server.celery_app", *TASK_MODULES],
    ["perfci_agent.commands.agent", "perfci_agent.daemon.agent"],
], ids=["api", "worker", "agent"])
def test_a_process_starts_without_scipy(modules: list[str]) -> None:
    out = subprocess.run([sys.executable, "-c", IMPORT_AND_LIST_SCIPY, *modules], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"importing {modules} loads scipy: {out.stdout.strip()[:300]}"

