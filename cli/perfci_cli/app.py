"""The `perfci` command line. Each area registers its own commands; heavy imports stay lazy
(inside the commands), so importing these modules costs little and `perfci --help` stays quick."""

from __future__ import annotations

import typer

from perfci_agent.commands import agent, demo, measure
from perfci_server import cli as server

from .commands import alerts, bisect, check, compare, plot

app = typer.Typer(
    name="perfci",
    help="Performance-regression CI for DPDK dataplanes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Each module exposes register(app: typer.Typer). Order is the order of `perfci --help`.
for _commands in (measure, compare, alerts, check, plot, agent, bisect, server, demo):
    _commands.register(app)
