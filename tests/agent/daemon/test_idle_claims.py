"""An idle agent lets the server hold its claim for up to poll_seconds (60 s at most), and when the
answer comes sooner with nothing (a server that does not wait) it waits out the rest itself: an
idle agent asks about once per poll_seconds, whichever server it talks to."""

from __future__ import annotations

import threading

import pytest

from perfci_agent.daemon import agent as daemon
from perfci_agent.daemon.config import load


class WaitsRecorded(threading.Event):
    def __init__(self) -> None:
        super().__init__()
        self.waited: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waited.append(timeout)
        return False


class ServerAnsweringAtOnce:
    def __init__(self) -> None:
        self.waits: list[float] = []

    def __enter__(self) -> ServerAnsweringAtOnce:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def heartbeat(self, **kw: object) -> dict:
        return {}

    def claim(self, wait: float = 0.0) -> None:
        self.waits.append(wait)
        return None


@pytest.mark.parametrize(("poll_seconds", "asked"), [(5.0, 5.0), (300.0, 60.0)])
def test_an_idle_claim_asks_the_server_to_wait_and_the_agent_waits_the_rest(tmp_path, poll_seconds, asked):
    cfg = load(None, environ={"PERFCI_AGENT_SERVER_URL": "http://127.0.0.1:1", "PERFCI_AGENT_MACHINE_NAME": "m",
                              "PERFCI_AGENT_STATE_DIR": str(tmp_path / "state"), "PERFCI_AGENT_POLL_SECONDS": str(poll_seconds)})
    stop = WaitsRecorded()
    agent = daemon.Agent(cfg, stop=stop)
    server = ServerAnsweringAtOnce()
    agent.client = lambda: server  # type: ignore[method-assign]
    agent.identity_holds = lambda: True  # type: ignore[method-assign]
    agent.step()
    assert server.waits == [asked]
    [waited] = stop.waited
    assert poll_seconds - 1 < waited <= poll_seconds  # the server answered at once: the agent does not spin
