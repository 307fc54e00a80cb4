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
        "perfci_agent.measure_cli",
        "perfci_agent.compare_cli",
        "perfci_agent.alerts_cli",
        "perfci_agent.check_cli",
        "perfci_agent.plot_cli",
        "perfci_agent.daemon.cli",
        "perfci_agent.bisect.cli",
        "perfci_server.cli",
        "perfci_agent.demo.cli",
    ):
        import_module(module).register(app)


_register()
