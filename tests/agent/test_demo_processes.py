"""The demo's children are stopped however the demo ends: SIGTERM or Ctrl-C of the demo."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SUPERVISOR = """
import sys, time
from contextlib import ExitStack
from pathlib import Path
from perfci_agent.demo import run
run._stop_on_signals()
log = Path(sys.argv[1])
with ExitStack() as stack:
    for name in ("server", "worker"):
        # a child that also starts a grandchild in its own process group
        p = stack.enter_context(run._process(name, ["sh", "-c", "sleep 600 & echo $!; wait"], log / f"{name}.log", {"PATH": "/usr/bin:/bin"}))
        print(p.pid, flush=True)
    print("ready", flush=True)
    # Short sleeps, as the demo's own waits: CPython sees a signal that lands just before a sleep
    # starts only when that sleep ends, so one long sleep could outlast the test's wait.
    while True:
        time.sleep(0.2)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_no_child_outlives_the_demo(tmp_path, sig):
    sup = subprocess.Popen([sys.executable, "-c", SUPERVISOR, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    pids = []
    for line in sup.stdout:
        if line.strip() == "ready":
            break
        pids.append(int(line))
    grandchildren = []
    for name in ("server", "worker"):
        deadline = time.monotonic() + 60
        while not (tmp_path / f"{name}.log").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.05)
        grandchildren.append(int((tmp_path / f"{name}.log").read_text().split()[0]))
    try:
        assert all(_alive(p) for p in pids + grandchildren)
        sup.send_signal(sig)
        sup.wait(timeout=60)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in pids + grandchildren) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in pids + grandchildren if _alive(p)], "children survived the demo"
    finally:
        for p in pids + grandchildren:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
        sup.kill()
