"""`perfci agent run|check` exit codes: 0 healthy, 1 a problem per line, 2 usage errors."""

from __future__ import annotations

import json
import logging
import os
import signal

import pytest
from typer.testing import CliRunner

from perfci_cli.app import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def process_setup_undone():
    """`agent run` sets up its process: root logging on stderr (here the runner's stream, closed
    after the call) and SIGTERM/SIGINT handlers. In the test process that must end with the test,
    or every later test that logs at info writes "Logging error" tracebacks into its output."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    signals = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for sig, handler in signals.items():
        signal.signal(sig, handler)


def config(tmp_path, extra: str = "") -> str:
    path = tmp_path / "agent.toml"
    path.write_text(f'server_url = "http://127.0.0.1:9"\nmachine_name = "dut"\nstate_dir = "{tmp_path / "state"}"\n'
                    f'cores = [{max(os.sched_getaffinity(0))}]\nbackends = ["tsc"]\n{extra}')
    return str(path)


def test_a_missing_config_file_is_a_usage_error(tmp_path):
    for command in ("run", "check"):
        result = runner.invoke(app, ["agent", command, "--config", str(tmp_path / "nope.toml")])
        assert result.exit_code == 2 and "does not exist" in result.output


def test_an_invalid_config_prints_each_problem_and_exits_1(tmp_path):
    bad = config(tmp_path, 'poll_seconds = -1\nrefuse_untuned = "maybe"\n')
    result = runner.invoke(app, ["agent", "run", "--config", bad])
    assert result.exit_code == 1
    problems = [line for line in result.output.splitlines() if line.startswith("config: ")]
    assert len(problems) == 2 and any("poll_seconds" in p for p in problems) and any("refuse_untuned" in p for p in problems)
    result = runner.invoke(app, ["agent", "check", "--config", bad, "--no-server", "--json"])
    checks = json.loads(result.output)["checks"]
    assert result.exit_code == 1 and [c["name"] for c in checks if c["status"] == "fail"] == ["config", "config"]


def test_check_is_healthy_with_an_enrollment_token_and_not_with_a_readable_token_file(tmp_path):
    path = config(tmp_path, 'enrollment_token = "pce_x"\n')
    result = runner.invoke(app, ["agent", "check", "--config", path, "--no-server", "--json"])
    report = json.loads(result.output)
    assert result.exit_code == 0 and report["ok"] is True, result.output
    names = {c["name"] for c in report["checks"]}
    assert {"config", "meson", "ninja", "libdpdk", "dir", "token", "cores", "backends"} <= names
    assert not any(c["name"] == "server" for c in report["checks"])  # --no-server

    token = tmp_path / "state" / "agent.token"
    token.parent.mkdir()
    token.write_text("pca_x\n")
    token.chmod(0o644)
    result = runner.invoke(app, ["agent", "check", "--config", path, "--no-server"])
    assert result.exit_code == 1
    assert any(line.startswith("fail token") and "must be 0600" in line for line in result.output.splitlines())


def test_check_says_when_the_server_does_not_answer(tmp_path):
    result = runner.invoke(app, ["agent", "check", "--config", config(tmp_path, 'enrollment_token = "pce_x"\n'), "--json"])
    failed = {c["name"]: c["detail"] for c in json.loads(result.output)["checks"] if c["status"] == "fail"}
    assert result.exit_code == 1 and list(failed) == ["server"] and "Connection refused" in failed["server"]


def test_run_refuses_to_start_unenrolled_without_an_enrollment_token(tmp_path):
    result = runner.invoke(app, ["agent", "run", "--config", config(tmp_path)])
    assert result.exit_code == 1
    assert "not enrolled" in result.output and "no enrollment_token is configured" in result.output
