"""Grafana provisioning: parses, takes its secrets from the environment, points at files that exist."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from dashboards import CONTAINER_MOUNTS, JSON_DIR, PROVISIONING_DIR
from dashboards.generate import FACTORIES
from dashboards.sql_query import DATASOURCE_TYPE, DATASOURCE_UID


def _load(kind: str) -> list[dict]:
    files = sorted((PROVISIONING_DIR / kind).glob("*.yaml"))
    assert files, f"no provisioning/{kind}/*.yaml"
    return [yaml.safe_load(f.read_text()) for f in files]


def _host_path(container_path: str) -> Path:
    for mount, host in CONTAINER_MOUNTS.items():
        if container_path == mount or container_path.startswith(mount + "/"):
            return host / container_path[len(mount):].lstrip("/")
    raise AssertionError(f"{container_path} is under no documented mount {sorted(CONTAINER_MOUNTS)}")


def test_datasource_reads_connection_settings_from_the_environment():
    [config] = _load("datasources")
    assert config["apiVersion"] == 1
    [source] = config["datasources"]
    assert (source["uid"], source["type"]) == (DATASOURCE_UID, DATASOURCE_TYPE)
    env = re.compile(r"^\$\{PERFCI_GRAFANA_DB_[A-Z]+\}$")
    for value in (source["url"], source["user"], source["jsonData"]["database"], source["secureJsonData"]["password"]):
        assert env.match(value), value
    assert "password" not in source and "password" not in source["jsonData"]


def test_dashboard_provider_loads_the_generated_json():
    [config] = _load("dashboards")
    [provider] = config["providers"]
    assert provider["type"] == "file"
    folder = _host_path(provider["options"]["path"])
    assert folder == JSON_DIR
    assert sorted(p.name for p in folder.glob("*.json")) == sorted(FACTORIES)


def test_provisioning_mount_holds_both_kinds():
    root = _host_path("/etc/grafana/provisioning")
    assert (root / "datasources").is_dir() and (root / "dashboards").is_dir()
