"""A setting the server refuses is named with the rule it breaks, never with its value: the refusal
at start once printed the end of the settings it was given, and with them a forge token."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from perfci_server.settings import Settings

SECRETS = {
    "PERFCI_DATABASE_URL": "postgresql+psycopg://perfci:db-password-7f3a9c@127.0.0.1:1/perfci",
    "PERFCI_GITEA_TOKEN": "gitea-token-4be1d0a9c2",
    "PERFCI_GITHUB_TOKEN": "ghp_githubtoken5c8e21",
    "PERFCI_GITLAB_TOKEN": "glpat-gitlabtoken93d1",
    "PERFCI_GRAFANA_DB_PASSWORD": "grafana-password-61aa",
    "PERFCI_ADMIN_TOKEN": "short-admin-0b7e",  # too short for production: the refusal under test
}
REVEALING = [value for value in SECRETS.values()] + ["db-password-7f3a9c", "4be1d0a9c2", "0b7e"]


@pytest.fixture
def secret_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PERFCI_ENV", raising=False)
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)


def test_the_admin_token_refusal_names_the_rule_not_the_values(secret_settings):
    with pytest.raises(ValidationError) as refused:
        Settings()
    message = str(refused.value)
    assert "PERFCI_ADMIN_TOKEN must be set to a secret of at least 24 characters" in message
    assert not [secret for secret in REVEALING if secret in message], message


@pytest.mark.parametrize(("name", "value"), [("PERFCI_PORT", "port-80-not-a-number"), ("PERFCI_GRAFANA_DB_USER", "Not-A-Role-Name"),
                                             ("PERFCI_UPLOAD_MAX_BYTES", "12")])
def test_a_field_refusal_names_the_field_not_its_value(secret_settings, monkeypatch, name, value):
    monkeypatch.setenv("PERFCI_ADMIN_TOKEN", "a-real-secret-of-32-characters!!")
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as refused:
        Settings()
    message = str(refused.value)
    assert name.removeprefix("PERFCI_").lower() in message
    assert value not in message and not [secret for secret in REVEALING if secret in message], message


def test_the_server_refusing_to_start_prints_no_secret(secret_settings, tmp_path):
    """`perfci server` itself, as an operator starts it: it exits, and nothing it printed holds a value."""
    env = {**os.environ, "PERFCI_DATA_DIR": str(tmp_path)}
    done = subprocess.run([str(Path(sys.executable).parent / "perfci"), "server"], env=env, capture_output=True, text=True,
                          errors="replace", timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "PERFCI_ADMIN_TOKEN must be set" in output, output
    assert not [secret for secret in REVEALING if secret in output], output
