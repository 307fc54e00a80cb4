"""An agent host installs `perfci[agent]`: no FastAPI, SQLAlchemy, Celery. The agent, its commands
and the `perfci` console script must work there; the core needs even less."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER_ONLY = ("fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "psycopg", "celery", "kombu", "redis", "prometheus_client")
CLIENT_ONLY = ("typer", "rich", "httpx", "matplotlib", "pydantic_settings", "perfci_agent", "perfci_server", "perfci_cli")

# Installed as sitecustomize on PYTHONPATH: the listed top-level modules cannot be imported.
BLOCKER = textwrap.dedent('''
    import importlib.abc, os, sys

    class _Absent(importlib.abc.MetaPathFinder):
        def __init__(self, names):
            self.names = set(names)

        def find_spec(self, fullname, path=None, target=None):
            if fullname.split(".")[0] in self.names:
                raise ImportError(f"{fullname} is not installed here", name=fullname)
            return None

    sys.meta_path.insert(0, _Absent(os.environ["PERFCI_TEST_ABSENT"].split(",")))
''')

IMPORT_ALL = textwrap.dedent('''
    import importlib, pkgutil, sys
    names = []
    for package in sys.argv[1:]:
        root = importlib.import_module(package)
        names.append(package)
        for info in pkgutil.walk_packages(root.__path__, package + "."):
            importlib.import_module(info.name)
            names.append(info.name)
    print(len(names), "modules")
''')


def run_without(absent: tuple[str, ...], argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(tmp_path), "PYTHONNOUSERSITE": "1",
           "PERFCI_TEST_ABSENT": ",".join(absent), "COLUMNS": "200"}
    return subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_the_blocker_blocks(tmp_path: Path) -> None:
    proc = run_without(SERVER_ONLY, [sys.executable, "-c", "import sqlalchemy"], tmp_path)
    assert proc.returncode == 1 and "sqlalchemy is not installed here" in proc.stderr


def test_agent_imports_without_the_server(tmp_path: Path) -> None:
    # every module of the agent, its commands included, without the server's package or stack, the
    # client's package (cli/) or its plotting
    proc = run_without(SERVER_ONLY + ("perfci_server", "perfci_cli", "matplotlib"),
                       [sys.executable, "-c", IMPORT_ALL, "perfci_core", "perfci_agent"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.split()[0]) > 40
    # the `perfci` app registers the server's commands too; they load the server's stack only when run
    proc = run_without(SERVER_ONLY, [sys.executable, "-c", IMPORT_ALL, "perfci_cli"], tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_perfci_measure_works_without_the_server_stack(tmp_path: Path) -> None:
    perfci = Path(sys.executable).parent / "perfci"
    if not perfci.exists():
        perfci = Path(shutil.which("perfci") or "perfci")
    for argv in (["--help"], ["measure", "--help"], ["compare", "--help"], ["alerts", "list", "--help"],
                 ["check", "--help"], ["plot", "--help"], ["bisect", "--help"], ["agent", "run", "--help"]):
        # an agent host (perfci[agent]) has no matplotlib: `perfci plot` loads it only to draw
        proc = run_without(SERVER_ONLY + ("matplotlib",), [str(perfci), *argv], tmp_path)
        assert proc.returncode == 0, (argv, proc.stderr)
    proc = run_without(SERVER_ONLY, [str(perfci), "measure", "--help"], tmp_path)
    assert "--backend" in proc.stdout and "--reps" in proc.stdout
    # bad input keeps its exit code: 2, with the reason
    proc = run_without(SERVER_ONLY, [str(perfci), "measure", "--repo", str(tmp_path)], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "error" in proc.stderr


def test_core_imports_with_numpy_scipy_pydantic_only(tmp_path: Path) -> None:
    proc = run_without(SERVER_ONLY + CLIENT_ONLY, [sys.executable, "-c", IMPORT_ALL, "perfci_core"], tmp_path)
    assert proc.returncode == 0, proc.stderr


def requirement_names(requirements: list[str]) -> set[str]:
    return {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower().replace("_", "-") for r in requirements}


def test_the_agent_extra_pulls_no_server_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    agent = requirement_names(project["project"]["dependencies"] + project["project"]["optional-dependencies"]["agent"])
    server = requirement_names(project["project"]["optional-dependencies"]["server"])
    assert {"fastapi", "uvicorn", "sqlalchemy", "alembic", "psycopg", "celery", "redis", "prometheus-client"} <= server
    assert agent & {"fastapi", "uvicorn", "sqlalchemy", "alembic", "psycopg", "celery", "redis", "prometheus-client"} == set()
    assert "matplotlib" not in agent  # perfci plot is the client's: perfci[client]
    assert "matplotlib" in requirement_names(project["project"]["optional-dependencies"]["client"])
    assert project["project"]["scripts"]["perfci"] == "perfci_cli.app:app"


@pytest.mark.parametrize("package", ["perfci_core", "perfci_agent", "perfci_server", "perfci_cli"])
def test_each_package_is_found_and_shipped(package: str) -> None:
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folder = next(ROOT / where for where in tool["packages"]["find"]["where"] if (ROOT / where / package).is_dir())
    assert (folder / package / "__init__.py").exists()
    assert any(package.startswith(pattern.rstrip("*")) for pattern in tool["packages"]["find"]["include"])


def test_the_c_tools_sources_stay_package_data() -> None:
    """memhazard and the calibration loop: the agent builds both from its installed package."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["perfci_agent"]
    package = ROOT / "agents" / "perfci_agent"
    tools = (package / "hazards" / "tool", package / "clockcal")
    assert sorted(str(p.relative_to(package)) for pattern in data for p in package.glob(pattern)) == sorted(
        str(p.relative_to(package)) for tool in tools for p in tool.iterdir() if p.suffix == ".c" or p.name == "meson.build")
    assert all((tool / "meson.build").exists() for tool in tools)
