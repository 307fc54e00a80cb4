"""The CI stage of the playbooks: perfci_agent applied for real to this host, twice.

Only with PERFCI_TEST_APPLY_PLAYBOOKS=1 (`.ci/run` sets it): without it the apply tests are skipped
with that reason in the report, while ansible-lint and the syntax checks still run. With it, the
host must be a throwaway Debian 12 machine (CI, a container) and we must be root: the apply
installs packages, creates the `perfci-agent` user and writes the sysctls live. What is switched off
by variables: the kernel command line (GRUB, reboot) and starting the service (no systemd init
here). The venv, config and state directories, the sysctl.d and tmpfiles.d files and a private
hugetlbfs mount live in a scratch directory removed afterwards; the unit gets its own name.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from .ansible_run import BIN, ROOT, Run, environment, playbook

VAULT_SECRET = "enroll-" + os.urandom(8).hex()
SERVICE = "perfci-agent-ci"


def _live(key: str) -> int:
    return int(Path("/proc/sys", key.replace(".", "/")).read_text().split()[0])


APPLY_ENV = "PERFCI_TEST_APPLY_PLAYBOOKS"


def _require_throwaway_root() -> None:
    if os.environ.get(APPLY_ENV) != "1":
        pytest.skip(f"not applied: applying perfci_agent changes this host (packages, a user, sysctls); "
                    f"{APPLY_ENV}=1 opts in, as .ci/run does on its throwaway machine")
    if os.geteuid() != 0:
        pytest.fail(f"{APPLY_ENV}=1, but applying perfci_agent to this host needs root", pytrace=False)
    if not Path("/etc/debian_version").exists():
        pytest.fail(f"{APPLY_ENV}=1, but perfci_agent targets Debian", pytrace=False)


@pytest.fixture(scope="session")
def agent_host():
    """Applies agent.yml to localhost twice; yields the two runs and the paths it used."""
    _require_throwaway_root()
    scratch = Path(tempfile.mkdtemp(prefix="perfci-playbooks-", dir="/var/tmp"))
    scratch.chmod(0o755)  # the service user walks into state/ and runs venv/
    inventory = scratch / "inventory"
    group_vars = inventory / "group_vars" / "agents"
    group_vars.mkdir(parents=True)
    core = (os.cpu_count() or 1) - 1
    # A private hugetlbfs: the role changes its group and mode, other DPDK users keep theirs.
    hugepages = scratch / "hugepages"
    hugepages.mkdir()
    for etc in ("sysctl.d", "tmpfiles.d"):  # present on a real host
        (scratch / etc).mkdir()
    subprocess.run(["mount", "-t", "hugetlbfs", "-o", "pagesize=2M", "nodev", str(hugepages)], check=True)
    (inventory / "hosts.yml").write_text(
        yaml.safe_dump(
            {
                "agents": {
                    "hosts": {
                        "localhost": {"ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"}
                    }
                }
            }
        )
    )
    (group_vars / "main.yml").write_text(
        yaml.safe_dump(
            {
                # The checkout under test, as CI installs it.
                "perfci_agent_pip_source": f"{ROOT}[agent]",
                "perfci_agent_enrollment_token": "{{ vault_perfci_agent_enrollment_token }}",
                "perfci_agent_cores": [core],
                "perfci_agent_manage_kernel_cmdline": False,
                "perfci_agent_manage_service": False,
                # .ci/install-deps installed the packages; the task still checks they are present.
                "perfci_agent_apt_update_cache": False,
                # Never shrink the pool other DPDK runs on this host may be using.
                "perfci_agent_hugepages": max(_live("vm.nr_hugepages"), 256),
                "perfci_agent_venv_dir": str(scratch / "venv"),
                "perfci_agent_config_dir": str(scratch / "etc"),
                "perfci_agent_state_dir": str(scratch / "state"),
                "perfci_agent_service_name": SERVICE,
                "perfci_agent_sysctl_file": str(scratch / "sysctl.d" / "60-perfci-agent.conf"),
                "perfci_agent_tmpfiles_file": str(scratch / "tmpfiles.d" / "perfci-agent.conf"),
                "perfci_agent_hugepages_mount": str(hugepages),
                # A VM has no cpufreq driver; everything else calibration checks is checked.
                "perfci_calibration_require_cpufreq": False,
            }
        )
    )
    password = scratch / "vault-password"
    password.write_text(os.urandom(16).hex())
    password.chmod(0o600)
    vault = group_vars / "vault.yml"
    vault.write_text(yaml.safe_dump({"vault_perfci_agent_enrollment_token": VAULT_SECRET}))
    subprocess.run(
        [str(BIN / "ansible-vault"), "encrypt", "--vault-password-file", str(password), str(vault)],
        check=True, env=environment(), capture_output=True,
    )
    args = ["-i", str(inventory / "hosts.yml"), "--vault-password-file", str(password), "agent.yml"]
    first = playbook(*args)
    second = playbook(*args) if first.returncode == 0 else Run(-1, "not run: the first apply failed", 0.0)
    yield {
        "first": first,
        "second": second,
        "scratch": scratch,
        "inventory": inventory / "hosts.yml",
        "vault_password": password,
        "core": core,
        "venv": scratch / "venv",
        "config": scratch / "etc" / "agent.toml",
        "state": scratch / "state",
        "unit": Path("/etc/systemd/system") / f"{SERVICE}.service",
        "hugepages": hugepages,
        "sysctl_file": scratch / "sysctl.d" / "60-perfci-agent.conf",
    }
    subprocess.run(["umount", str(hugepages)], check=False)
    Path("/etc/systemd/system", f"{SERVICE}.service").unlink(missing_ok=True)
    shutil.rmtree(scratch, ignore_errors=True)
