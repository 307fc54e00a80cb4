"""The memhazard tool, built once per test session into a scratch cache (every pattern test runs it)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from perfci_agent.hazards import HazardReport, memhazard_lib, parse_report


@pytest.fixture(scope="session")
def tool_lib(tmp_path_factory) -> Path:
    return memhazard_lib(tmp_path_factory.mktemp("memhazard-cache"))


@pytest.fixture(scope="session")
def run_window(tool_lib) -> Callable[..., HazardReport]:
    """run_window(exe, out_dir, window, *tool_args): the report of one memhazard run of ``exe``
    with ``window`` as its window function."""
    def run(exe: Path, out_dir: Path, window: str, *extra: str) -> HazardReport:
        out = out_dir / f"{window}.out"
        subprocess.run(["valgrind", "-q", "--tool=memhazard", f"--window-fn={window}", f"--out-file={out}",
                        "--vex-iropt-register-updates=allregs-at-mem-access", "--read-inline-info=yes", *extra,
                        str(exe)], check=True, env={**os.environ, "VALGRIND_LIB": str(tool_lib)}, timeout=120)
        return parse_report(out.read_text())
    return run
