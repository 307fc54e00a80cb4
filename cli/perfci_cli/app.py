"""The `perfci` command line. Each area registers its own commands; heavy imports stay lazy."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="perfci",
    help="Performance-regression CI for DPDK dataplanes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    from importlib import import_module

    # Each module exposes register(app: typer.Typer). Order is the order of `perfci --help`.
    for module in (
        "perfci_agent.commands.measure",
        "perfci_agent.commands.compare",
        "perfci_agent.commands.alerts",
        "perfci_agent.commands.check",
        "perfci_agent.commands.plot",
        "perfci_agent.commands.agent",
        "perfci_agent.commands.bisect",
        "perfci_server.cli",
        "perfci_agent.commands.demo",
    ):
        import_module(module).register(app)


_register()
