"""Lint, syntax, a real apply of perfci_agent (twice: idempotence), calibration, the agent's self-check."""

from __future__ import annotations

import grp
import pwd
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest

from .ansible_run import BIN, PLAYBOOKS, ROOT, playbook, run, tail
from .conftest import VAULT_SECRET, _live

pytestmark = [pytest.mark.playbooks, pytest.mark.timeout(1800)]

PLAYBOOK_FILES = sorted(p.name for p in PLAYBOOKS.glob("*.yml"))


def test_every_playbook_is_listed():
    assert PLAYBOOK_FILES == ["agent.yml", "calibration.yml", "server.yml"]


def test_ansible_lint_production_profile():
    result = run([str(BIN / "ansible-lint"), "-c", ".ansible-lint", "--nocolor"])
    assert result.returncode == 0, tail(result.output)
    assert "Profile 'production' was required, and it passed" in result.output, tail(result.output)


@pytest.mark.parametrize("name", PLAYBOOK_FILES)
def test_syntax_check(name):
    result = playbook("--syntax-check", name)
    assert result.returncode == 0, tail(result.output)


def test_first_apply_succeeds(agent_host):
    first = agent_host["first"]
    assert first.returncode == 0, tail(first.output, 80)
    assert first.recap()["localhost"]["failed"] == 0
    assert "perfci_calibration: localhost is tuned" in first.output


def test_second_apply_changes_nothing(agent_host):
    second = agent_host["second"]
    assert second.returncode == 0, tail(second.output, 80)
    recap = second.recap()
    assert "localhost" in recap, tail(second.output)
    assert recap["localhost"]["changed"] == 0, f"not idempotent, changed: {second.changed_tasks()}"
    assert recap["localhost"]["failed"] == 0
    print(f"apply 1: {agent_host['first'].seconds:.1f} s, apply 2: {second.seconds:.1f} s")


def test_config_file_holds_the_vaulted_token_for_the_service_user_only(agent_host):
    config = agent_host["config"]
    st = config.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert pwd.getpwuid(st.st_uid).pw_name == "perfci-agent"
    assert grp.getgrgid(st.st_gid).gr_name == "perfci-agent"
    doc = tomllib.loads(config.read_text())
    assert doc["enrollment_token"] == VAULT_SECRET
    assert doc["cores"] == [agent_host["core"]]
    assert doc["machine_name"] == "localhost"
    assert doc["state_dir"] == str(agent_host["state"])
    assert doc["backends"] == ["auto"] and doc["refuse_untuned"] is False
    assert isinstance(doc["poll_seconds"], float) and isinstance(doc["heartbeat_seconds"], float)


def test_unit_file_runs_the_venv_agent_as_the_service_user(agent_host):
    unit = agent_host["unit"].read_text()
    assert f"ExecStart={agent_host['venv']}/bin/perfci agent run --config {agent_host['config']}\n" in unit
    for line in ("User=perfci-agent", "Restart=on-failure", "KillSignal=SIGTERM", "TimeoutStopSec=300"):
        assert line + "\n" in unit
    assert (agent_host["venv"] / "bin" / "perfci").exists()


def test_sysctls_are_live_and_persisted(agent_host):
    assert agent_host["first"].returncode == 0
    wanted = {"kernel.perf_event_paranoid": 0, "kernel.numa_balancing": 0, "kernel.nmi_watchdog": 0}
    assert {key: _live(key) for key in wanted} == wanted
    persisted = agent_host["sysctl_file"].read_text()
    for key, value in wanted.items():
        assert f"{key} = {value}\n" in persisted


def test_hugetlbfs_mount_is_open_to_the_service_user(agent_host):
    st = agent_host["hugepages"].stat()
    assert stat.S_IMODE(st.st_mode) == 0o1770
    assert grp.getgrgid(st.st_gid).gr_name == "perfci-agent"


def test_calibration_fails_with_the_list_of_deviations(agent_host):
    """A drift made on purpose (a sysctl value and a hugepage count this host does not have)."""
    assert agent_host["first"].returncode == 0
    numa = _live("kernel.numa_balancing")
    hugepages = _live("vm.nr_hugepages")
    extra = (
        '{"perfci_calibration_cores": [%d], "perfci_calibration_min_hugepages": %d,'
        ' "perfci_calibration_sysctls": {"kernel.numa_balancing": %d}}' % (agent_host["core"], hugepages + 1, 1 - numa)
    )
    result = playbook(
        "-i", str(agent_host["inventory"]), "--vault-password-file", str(agent_host["vault_password"]),
        "-e", extra, "calibration.yml",
    )
    assert result.returncode == 2, tail(result.output)  # 2: a host failed
    assert "localhost is not tuned for benchmarking" in result.output, tail(result.output)
    assert f"sysctl kernel.numa_balancing is {numa}, expected {1 - numa}" in result.output
    assert f"{hugepages} hugepages reserved, expected at least {hugepages + 1}" in result.output
    isolated = Path("/sys/devices/system/cpu/isolated").read_text().strip()
    if str(agent_host["core"]) not in isolated.split(","):
        assert f"isolcpus does not cover core(s) {agent_host['core']}" in result.output


def test_kernel_cmdline_change_runs_update_grub_and_asks_for_a_reboot(agent_host):
    """The GRUB part, switched off in the applies above: the drop-in goes to the scratch directory,
    update-grub is replaced by `true` and the reboot is not allowed, so the handlers run safely."""
    assert agent_host["first"].returncode == 0
    dropin = agent_host["scratch"] / "grub.d" / "60-perfci-agent.cfg"
    core = agent_host["core"]
    extra = (
        '{"perfci_agent_manage_kernel_cmdline": true, "perfci_agent_reboot_allowed": false,'
        f' "perfci_agent_grub_dropin": "{dropin}", "perfci_agent_update_grub_command": "/usr/bin/true"}}'
    )
    args = ["-i", str(agent_host["inventory"]), "--vault-password-file", str(agent_host["vault_password"]),
            "--tags", "kernel_cmdline", "-e", extra, "agent.yml"]
    result = playbook(*args)
    assert result.returncode == 0, tail(result.output)
    assert f'isolcpus={core} nohz_full={core} rcu_nocbs={core}"' in dropin.read_text()
    assert "perfci_agent : Update GRUB" in result.changed_tasks()
    assert "reboot localhost before benchmarking" in result.output
    assert "perfci_agent : Reboot the agent host" not in result.changed_tasks()
    again = playbook(*args)
    assert again.returncode == 0 and again.recap()["localhost"]["changed"] == 0, again.changed_tasks()


def test_installed_agent_self_check_passes(agent_host):
    """The contract's `perfci agent check`, run as the service user the way systemd would."""
    assert agent_host["first"].returncode == 0
    result = subprocess.run(
        ["runuser", "-u", "perfci-agent", "--", str(agent_host["venv"] / "bin" / "perfci"),
         "agent", "check", "--config", str(agent_host["config"]), "--no-server"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_server_role_grafana_source_exists_in_the_repository():
    """perfci_server copies <checkout>/dashboards/provisioning (its default source) to Grafana."""
    source = ROOT / "dashboards" / "provisioning"
    assert source.is_dir(), f"{source} is missing: perfci_server_grafana_provisioning_src would fail on a server"
    assert any(source.rglob("*.yml")) or any(source.rglob("*.yaml")), f"no provisioning files in {source}"
