"""Identity vs host state under a running agent, with a fake /proc/cpuinfo and /proc/meminfo: the
fingerprint is really collected before every claim. Hugepages reserved while it runs: it goes on
claiming. Another CPU model: it stops claiming and says why, until the machine is itself again."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import pytest

from perfci_agent import cpuinfo, fingerprint
from perfci_agent.daemon import agent as daemon
from perfci_agent.daemon.config import load

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 106
model name\t: {model}
stepping\t: 6
microcode\t: 0xd0003a5
flags\t\t: fpu sse sse2 avx2

"""
MEMINFO = "MemTotal:       65536000 kB\nHugePages_Total:     {pages}\nHugepagesize:       2048 kB\n"


class Host:
    """The fake files the fingerprint reads."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.cpuinfo, self.meminfo = root / "cpuinfo", root / "meminfo"
        monkeypatch.setattr(cpuinfo, "PROC_CPUINFO", self.cpuinfo)
        monkeypatch.setattr(fingerprint, "PROC_MEMINFO", self.meminfo)
        self.set(model="Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", pages=0)

    def set(self, *, model: str | None = None, pages: int | None = None) -> None:
        if model is not None:
            self.cpuinfo.write_text(CPUINFO.format(model=model))
        if pages is not None:
            self.meminfo.write_text(MEMINFO.format(pages=pages))


class Server:
    def __init__(self) -> None:
        self.claims = 0
        self.heartbeats: list[dict] = []

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def heartbeat(self, **kw: object) -> dict:
        self.heartbeats.append(kw)
        return {}

    def claim(self, wait: float = 0.0) -> None:
        self.claims += 1
        return None  # nothing queued: the agent waits a poll interval


@pytest.fixture
def running(tmp_path, monkeypatch) -> tuple[daemon.Agent, Host, Server]:
    host = Host(tmp_path, monkeypatch)
    cfg = load(None, environ={"PERFCI_AGENT_SERVER_URL": "http://127.0.0.1:1", "PERFCI_AGENT_MACHINE_NAME": "m",
                              "PERFCI_AGENT_STATE_DIR": str(tmp_path / "state"), "PERFCI_AGENT_POLL_SECONDS": "0.01"})
    agent = daemon.Agent(cfg, stop=threading.Event())
    server = Server()
    agent.client = lambda: server  # type: ignore[method-assign]
    enrolled = daemon.identity.this_machine(cfg.core)  # what enroll() records
    cfg.enrollment_path.parent.mkdir(parents=True)
    cfg.enrollment_path.write_text(json.dumps({"machine_fingerprint": enrolled.machine_id, "machine": enrolled.details}))
    return agent, host, server


def test_hugepages_reserved_under_a_running_agent_do_not_stop_its_claims(running):
    agent, host, server = running
    agent.step()
    before = daemon.identity.this_machine(agent.config.core)
    host.set(pages=256)  # what the agent role does on a fresh host
    after = daemon.identity.this_machine(agent.config.core)
    assert after.machine_id != before.machine_id and after.details["hugepages_total"] == 256  # the fake is read
    agent.step()
    assert server.claims == 2 and agent.identity_problem is None


def test_another_cpu_model_stops_claims_with_a_message_until_it_is_back(running, caplog):
    agent, host, server = running
    agent.step()
    host.set(model="AMD EPYC 9654 96-Core Processor")
    with caplog.at_level(logging.INFO, logger="perfci_agent.daemon"):
        agent.step()
        agent.step()
        assert server.claims == 1
        assert "cpu_model_name" in agent.identity_problem
        stopped = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(stopped) == 1 and stopped[0].startswith("not claiming jobs: this machine's identity changed since enrollment (cpu_model_name)")
        assert server.heartbeats[-1]["stopped_claiming"] == agent.identity_problem  # the server hears why at once
        host.set(model="Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz")
        agent.step()
        agent.step()
    assert server.claims == 3 and agent.identity_problem is None
    assert server.heartbeats[-1]["stopped_claiming"] is None
    assert any("claiming jobs" in r.getMessage() and r.levelno == logging.INFO for r in caplog.records)


def test_the_start_check_lets_host_state_pass_and_names_only_identity_keys(running):
    agent, host, _ = running
    host.set(pages=512)
    daemon.identity.check_enrollment_record(agent.config, daemon.identity.this_machine(agent.config.core))
    host.set(model="Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz")
    with pytest.raises(daemon.identity.IdentityError, match=r"identity changed since enrollment \(cpu_model_name\)"):
        daemon.identity.check_enrollment_record(agent.config, daemon.identity.this_machine(agent.config.core))
