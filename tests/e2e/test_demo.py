"""The README's main job, `perfci demo`, run as users run it: its own processes (server on SQLite
with in-process tasks, agent daemon, `perfci alerts bisect`, `perfci plot`) and its own checks —
exactly one regression alert at the regression commit, the bisect names it, plots are written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.dataplane]

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_passes(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFCI_")}
    perfci = Path(sys.executable).parent / "perfci"
    done = subprocess.run([str(perfci), "demo", "--workdir", str(tmp_path / "demo"), "--source", str(ROOT), "--backend", "sim"],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "demo passed" in done.stderr
    plots = sorted(p.name for p in (tmp_path / "demo" / "plots").glob("*.png"))
    assert plots == ["ipp.png", "l1d_misses_pp.png", "sf_blocks_pp.png"]
    assert all((tmp_path / "demo" / "plots" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in plots)
