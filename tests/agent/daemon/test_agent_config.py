"""The daemon's config file: the contract's keys, environment overrides, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfci_agent.daemon.config import KEYS, ConfigError, ConfigFileError, load

FULL = """
server_url = "http://127.0.0.1:8000/"
machine_name = "dut-01"
state_dir = "/var/lib/perfci-agent"
token_file = ""
enrollment_token = "pce_abc"
cores = [2, 3]
backends = ["auto"]
repetitions = 0
refuse_untuned = false
sim_family = ""
poll_seconds = 5.0
heartbeat_seconds = 30.0
log_level = "info"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(text)
    return path


def test_the_contract_file_parses_with_every_key(tmp_path):
    cfg = load(write(tmp_path, FULL), environ={})
    assert set(KEYS) == {line.split("=")[0].strip() for line in FULL.strip().splitlines()}
    assert cfg.server_url == "http://127.0.0.1:8000"  # trailing slash dropped
    assert cfg.cores == [2, 3] and cfg.core == 2 and cfg.backends == ["auto"]
    assert cfg.token_path == Path("/var/lib/perfci-agent/agent.token")  # "" means the default
    assert cfg.spool_dir == Path("/var/lib/perfci-agent/spool") and cfg.cache_dir == Path("/var/lib/perfci-agent/cache")


def test_defaults_apply_to_a_minimal_file(tmp_path):
    cfg = load(write(tmp_path, 'server_url = "https://ci.example.com"\nmachine_name = "m"\n'), environ={})
    assert (cfg.repetitions, cfg.refuse_untuned, cfg.poll_seconds, cfg.heartbeat_seconds, cfg.log_level) == (0, False, 5.0, 30.0, "info")
    assert cfg.state_dir == Path("/var/lib/perfci-agent") and cfg.backends == ["auto"]


def test_the_environment_wins_and_lists_are_comma_separated(tmp_path):
    env = {
        "PERFCI_AGENT_SERVER_URL": "http://10.0.0.1:9000",
        "PERFCI_AGENT_CORES": "5, 7",
        "PERFCI_AGENT_BACKENDS": "sim,tsc",
        "PERFCI_AGENT_REFUSE_UNTUNED": "true",
        "PERFCI_AGENT_POLL_SECONDS": "0.5",
        "PERFCI_AGENT_REPETITIONS": "3",
        "PERFCI_AGENT_TOKEN_FILE": str(tmp_path / "tok"),
        "PERFCI_AGENT_LOG_LEVEL": "DEBUG",
        "PERFCI_OTHER": "ignored",
    }
    cfg = load(write(tmp_path, FULL), environ=env)
    assert cfg.server_url == "http://10.0.0.1:9000" and cfg.cores == [5, 7] and cfg.backends == ["sim", "tsc"]
    assert cfg.refuse_untuned is True and cfg.poll_seconds == 0.5 and cfg.repetitions == 3 and cfg.log_level == "debug"
    assert cfg.token_path == tmp_path / "tok"
    assert cfg.machine_name == "dut-01"  # from the file


def test_sim_family_is_one_the_hazard_simulator_models(tmp_path):
    assert load(write(tmp_path, FULL.replace('sim_family = ""', 'sim_family = "amd-zen4"')), environ={}).sim_family == "amd-zen4"
    with pytest.raises(ConfigError, match="unknown store-buffer family 'zen9'"):
        load(write(tmp_path, FULL.replace('sim_family = ""', 'sim_family = "zen9"')), environ={})


def test_environment_only(tmp_path):
    cfg = load(None, environ={"PERFCI_AGENT_SERVER_URL": "http://h:1", "PERFCI_AGENT_MACHINE_NAME": "x",
                              "PERFCI_AGENT_STATE_DIR": str(tmp_path)})
    assert cfg.token_path == tmp_path / "agent.token"


def test_every_problem_is_reported_with_where_it_came_from(tmp_path):
    path = write(tmp_path, 'server_url = "ftp://x"\ncores = [-1]\nbackends = ["gpu"]\nrepetitoins = 3\npoll_seconds = 0\n')
    with pytest.raises(ConfigError) as err:
        load(path, environ={"PERFCI_AGENT_HEARTBEAT_SECONDS": "soon"})
    problems = err.value.problems
    text = "\n".join(problems)
    assert any(p.startswith("machine_name: required") for p in problems)
    assert f"server_url: Value error, must start with http:// or https://, got 'ftp://x' (from {path})" in problems
    assert "repetitoins: unknown key" in text and "known keys: server_url" in text
    assert any(p.startswith("cores:") for p in problems)
    assert any(p.startswith("backends[0]:") and "'auto', 'pmu', 'sim' or 'tsc'" in p for p in problems)
    assert any(p.startswith("poll_seconds:") for p in problems)
    assert any(p.startswith("heartbeat_seconds:") and "(from PERFCI_AGENT_HEARTBEAT_SECONDS)" in p for p in problems)
    assert len(problems) == 7


def test_not_toml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(write(tmp_path, "server_url = \n"), environ={})
    with pytest.raises(ConfigFileError, match="does not exist"):
        load(tmp_path / "nope.toml", environ={})
