"""docker-compose.yml and the Dockerfile, checked without a Docker engine (none on these machines):
the file parses, every app command is a real `perfci` entry point with real options, environment
names are settings the app reads, every secret is documented, every mounted path exists."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from perfci_cli.app import app as cli_app
from perfci_server.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
APP_SERVICES = sorted(name for name, s in SERVICES.items() if s.get("build"))


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    rows = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(row.split(None, 1)[0].upper(), row.split(None, 1)[1]) for row in rows]


def test_the_stack_has_every_service() -> None:
    assert set(SERVICES) == {"postgres", "redis", "migrate", "api", "worker", "beat", "grafana"}
    assert APP_SERVICES == ["api", "beat", "migrate", "worker"]
    assert set(COMPOSE["volumes"]) >= {"postgres-data", "redis-data", "grafana-data"}


def test_long_running_services_have_health_checks() -> None:
    for name in ("postgres", "redis", "api", "worker", "grafana"):
        assert SERVICES[name]["healthcheck"]["test"][0] == "CMD", name


def test_dockerfile_entrypoint_is_the_console_script() -> None:
    instructions = dockerfile_instructions()
    entrypoint = [yaml.safe_load(arg) for op, arg in instructions if op == "ENTRYPOINT"]
    assert entrypoint == [["perfci"]]
    assert 'perfci = "perfci_cli.app:app"' in (ROOT / "pyproject.toml").read_text()
    for op, arg in instructions:
        if op == "COPY":
            for source in shlex.split(arg)[:-1]:
                assert (ROOT / source).exists(), f"Dockerfile copies {source}, which does not exist"


@pytest.mark.parametrize("service", APP_SERVICES + ["dockerfile-cmd"])
def test_each_app_command_is_a_real_entry_point(service: str) -> None:
    if service == "dockerfile-cmd":
        command = next(yaml.safe_load(arg) for op, arg in dockerfile_instructions() if op == "CMD")
    else:
        command = SERVICES[service]["command"]
    # Click rejects unknown commands and options before it honours --help.
    result = CliRunner().invoke(cli_app, [*command, "--help"])
    assert result.exit_code == 0, f"`perfci {' '.join(command)}`: {result.output}"


def test_app_environment_names_are_settings() -> None:
    fields = set(Settings.model_fields)
    for name in APP_SERVICES:
        for key in SERVICES[name]["environment"]:
            assert key.startswith("PERFCI_"), key
            assert key.removeprefix("PERFCI_").lower() in fields, f"{name}: {key} is not a perfci setting"


def test_production_settings_refuse_the_development_token() -> None:
    env = SERVICES["api"]["environment"]
    assert env["PERFCI_ENV"] == "production"
    with pytest.raises(ValueError, match="PERFCI_ADMIN_TOKEN"):
        Settings(env="production")


def test_every_variable_is_documented_in_env_example() -> None:
    used = set(re.findall(r"\$\{([A-Z0-9_]+)", (ROOT / "docker-compose.yml").read_text()))
    documented = set(re.findall(r"^([A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.M))
    assert used and used <= documented, f"undocumented: {sorted(used - documented)}"


def test_grafana_mounts_point_at_files_that_exist() -> None:
    mounts = [m.split(":") for m in SERVICES["grafana"]["volumes"] if m.startswith("./")]
    assert mounts
    for source, *_ in mounts:
        path = ROOT / source
        assert path.is_dir() and any(path.iterdir()), f"{source} is missing or empty"
    provisioning = ROOT / "dashboards" / "provisioning"
    datasource = "\n".join(p.read_text() for p in provisioning.rglob("*.yaml"))
    for key in SERVICES["grafana"]["environment"]:
        if key.startswith("PERFCI_GRAFANA_"):
            assert key in datasource, f"grafana gets {key} but the provisioning never reads it"


def test_grafana_reads_with_the_read_only_role_the_migration_creates() -> None:
    grafana = SERVICES["grafana"]["environment"]
    migrate = SERVICES["migrate"]["environment"]
    owner = SERVICES["postgres"]["environment"]["POSTGRES_USER"]
    assert grafana["PERFCI_GRAFANA_DB_USER"] == migrate["PERFCI_GRAFANA_DB_USER"] != owner
    assert grafana["PERFCI_GRAFANA_DB_PASSWORD"] == migrate["PERFCI_GRAFANA_DB_PASSWORD"]
    assert "POSTGRES_PASSWORD" not in grafana["PERFCI_GRAFANA_DB_PASSWORD"]
    assert Settings(grafana_db_user=migrate["PERFCI_GRAFANA_DB_USER"]).grafana_db_user == "perfci_grafana"
    for name in ("api", "worker", "beat"):  # only the migration sets the role's password
        assert "PERFCI_GRAFANA_DB_PASSWORD" not in SERVICES[name]["environment"], name


def test_the_api_health_check_is_readiness_on_a_real_route() -> None:
    """Compose waits for /ready (database and broker answer), not /health (the process answers)."""
    from perfci_server.app import create_app

    check = " ".join(SERVICES["api"]["healthcheck"]["test"])
    url = re.search(r"http://127\.0\.0\.1:8000(/\S+?)'", check)
    assert url is not None and url.group(1) == "/api/v1/ready", check
    assert url.group(1) in create_app().openapi()["paths"]
