"""The README's main job, `perfci demo`, run as users run it: its own processes (server on SQLite
with in-process tasks, agent daemon, `perfci alerts bisect`, `perfci plot`) and its own checks —
exactly one regression alert at the regression commit, the bisect names it, plots are written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# A hang detector, not a speed check: the demo takes minutes (README), several times that on a loaded host.
BUDGET_S = 45 * 60

pytestmark = [pytest.mark.dataplane, pytest.mark.timeout(BUDGET_S + 300)]

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_passes(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFCI_")}
    perfci = Path(sys.executable).parent / "perfci"
    demo = subprocess.Popen([str(perfci), "demo", "--workdir", str(tmp_path / "demo"), "--source", str(ROOT), "--backend", "sim"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, stderr = demo.communicate(timeout=BUDGET_S)
    finally:
        if demo.poll() is None:  # over budget or interrupted: the demo stops its server, workers and agent
            demo.send_signal(signal.SIGTERM)
            try:
                demo.wait(timeout=180)
            except subprocess.TimeoutExpired:
                os.killpg(demo.pid, signal.SIGKILL)
    assert demo.returncode == 0, stderr[-4000:]
    assert "demo passed" in stderr
    plots = sorted(p.name for p in (tmp_path / "demo" / "plots").glob("*.png"))
    assert plots == ["ipp.png", "l1d_misses_pp.png", "sf_blocks_pp.png"]
    assert all((tmp_path / "demo" / "plots" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in plots)
