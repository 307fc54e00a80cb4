"""Which package may import which, read from the source (:mod:`import_graph`): the agent and the
server share :mod:`perfci_core` and never import each other; the core is pure; Celery's app
imports no domain module, so no import circles through it; the server's rooms (its subpackages and
top-level modules) import one way, and no server module outgrows a reader."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.layout.import_graph import PACKAGES, cycles_through, graph, module_files, strongly_connected

EDGES = graph()
STDLIB = set(sys.stdlib_module_names)


def imports_of(package: str) -> dict[str, set[str]]:
    return {m: targets for m, targets in EDGES.items() if m.split(".")[0] == package}


def test_the_graph_sees_every_package() -> None:
    files = module_files()
    for package in PACKAGES:
        assert package in files, package
    # lazy imports inside functions count: the demo's Redis probe, the server CLI's uvicorn
    assert "redis" in EDGES["perfci_agent.demo.run"]
    assert "uvicorn" in EDGES["perfci_server.cli"]


@pytest.mark.parametrize(("package", "forbidden"), [("perfci_agent", "perfci_server"), ("perfci_server", "perfci_agent")])
def test_agent_and_server_never_import_each_other(package: str, forbidden: str) -> None:
    offenders = sorted(f"{m} -> {t}" for m, targets in imports_of(package).items() for t in targets if t.split(".")[0] == forbidden)
    assert offenders == []


def test_the_agent_never_imports_the_client() -> None:
    # cli/ builds on the agent (its HTTP transport, local measuring); an agent host needs no client
    offenders = sorted(f"{m} -> {t}" for m, targets in imports_of("perfci_agent").items() for t in targets
                       if t.split(".")[0] == "perfci_cli")
    assert offenders == []


def test_the_commands_that_ask_the_server_are_the_clients() -> None:
    agent_commands = {m.rsplit(".", 1)[1] for m in EDGES if m.startswith("perfci_agent.commands.")}
    client_commands = {m.rsplit(".", 1)[1] for m in EDGES if m.startswith("perfci_cli.commands.")}
    assert agent_commands == {"agent", "demo", "measure"}  # the ones that measure on the host
    assert {"alerts", "bisect", "check", "compare", "plot"} <= client_commands
    # the user's client (server and token from the command line or the environment) is the client's too
    assert not any(t.startswith("perfci_agent.commands") for t in EDGES["perfci_cli.client"])
    assert "perfci_agent.server_api" in EDGES["perfci_cli.client"]  # one HTTP transport, the agent's


def test_the_app_imports_what_it_registers() -> None:
    # plain imports, so a reader (and this graph) can follow `perfci`'s commands to their modules
    registered = {"perfci_agent.commands.measure", "perfci_agent.commands.agent", "perfci_agent.commands.demo",
                  "perfci_server.cli", *(f"perfci_cli.commands.{m}" for m in ("alerts", "bisect", "check", "compare", "plot"))}
    assert registered <= EDGES["perfci_cli.app"]


def test_core_needs_numpy_scipy_pydantic_only() -> None:
    used = {t.split(".")[0] for targets in imports_of("perfci_core").values() for t in targets}
    assert used - STDLIB - {"perfci_core"} == {"numpy", "scipy", "pydantic"}


def test_agent_and_server_use_the_core() -> None:
    for package in ("perfci_agent", "perfci_server"):
        assert any(t.startswith("perfci_core") for targets in imports_of(package).values() for t in targets), package


def test_celery_app_imports_no_domain_module() -> None:
    reachable, todo = set(), ["perfci_server.celery_app"]
    while todo:
        for target in EDGES.get(todo.pop(), ()):
            if target in EDGES and target not in reachable:
                reachable.add(target)
                todo.append(target)
    assert reachable == {"perfci_server.db", "perfci_server.logs", "perfci_server.settings"}


def test_no_import_circle_through_celery_app() -> None:
    assert cycles_through("perfci_server.celery_app", EDGES) == []


def test_no_import_circles_at_all() -> None:
    assert strongly_connected(EDGES) == []


def server_room(module: str) -> str:
    """perfci_server.alerts.detection -> perfci_server.alerts; perfci_server.deps stays itself."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_the_server_rooms_import_one_way() -> None:
    rooms: dict[str, set[str]] = {}
    for module, targets in imports_of("perfci_server").items():
        room = server_room(module)
        rooms.setdefault(room, set()).update(server_room(t) for t in targets if t.startswith("perfci_server.") and server_room(t) != room)
    assert strongly_connected(rooms) == []  # a room that needs a room above it sends a task by name (dispatch)


def test_no_server_module_over_500_lines() -> None:
    long = {m: n for m, path in module_files().items() if m.startswith("perfci_server")
            and (n := len(Path(path).read_text().splitlines())) > 500}
    assert long == {}


def test_the_worker_registers_every_task_by_name() -> None:
    from perfci_server import dispatch
    from perfci_server.celery_app import TASK_MODULES, celery_app, registered_tasks

    task_modules = sorted(m for m in EDGES if m.startswith("perfci_server.") and m.endswith(".tasks"))
    assert sorted(TASK_MODULES) == task_modules
    assert sorted(celery_app.conf.include) == task_modules
    names = set(registered_tasks())
    for entry in celery_app.conf.beat_schedule.values():
        assert entry["task"] in names
    assert {"perfci.alerts.detect_pending", "perfci.forge.post_status", "perfci.repos.complete_push", "perfci.pulls.evaluate", "perfci.bisect.advance"} <= names
    assert {dispatch.PULL_EVALUATE_TASK, dispatch.BACKFILL_TASK, dispatch.FORGET_ABANDONED_TASK} <= names


def test_no_core_module_over_500_lines() -> None:
    long = {m: n for m, path in module_files().items() if m.startswith("perfci_core")
            and (n := len(Path(path).read_text().splitlines())) > 500}
    assert long == {}
