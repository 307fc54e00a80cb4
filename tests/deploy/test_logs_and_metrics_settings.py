"""The deployments (docker-compose, the Ansible server role) give every server process JSON logs at a
level the settings take, and a /metrics token setting whose default (empty) means none."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from perfci_server.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "a" * 32


def _compose_default(value: str) -> str:
    """`${NAME:-default}` as compose expands it with NAME unset."""
    match = re.fullmatch(r"\$\{[A-Z0-9_]+:-([^}]*)\}", value)
    assert match, value
    return match.group(1)


def test_compose_processes_log_json_and_take_an_optional_metrics_token() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for name in ("api", "worker", "beat"):
        env = services[name]["environment"]
        settings = Settings(env=env["PERFCI_ENV"], admin_token=ADMIN, log_format=_compose_default(env["PERFCI_LOG_FORMAT"]),
                            log_level=_compose_default(env["PERFCI_LOG_LEVEL"]),
                            metrics_token=_compose_default(env["PERFCI_METRICS_TOKEN"]))
        assert settings.effective_log_format == "json" and settings.log_level == "info", name
        assert settings.metrics_token is None, name


def test_the_ansible_server_role_sets_the_same_settings() -> None:
    role = ROOT / "playbooks" / "roles" / "perfci_server"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    environment = (role / "vars" / "main.yml").read_text()
    for setting, variable in (("PERFCI_LOG_FORMAT", "perfci_server_log_format"), ("PERFCI_LOG_LEVEL", "perfci_server_log_level"),
                              ("PERFCI_METRICS_TOKEN", "perfci_server_metrics_token")):
        assert f"'{setting}': {variable}," in environment, setting
        assert variable in defaults, variable
    settings = Settings(env="production", admin_token=ADMIN, log_format=defaults["perfci_server_log_format"],
                        log_level=defaults["perfci_server_log_level"], metrics_token=defaults["perfci_server_metrics_token"])
    assert (settings.effective_log_format, settings.log_level, settings.metrics_token) == ("json", "info", None)
