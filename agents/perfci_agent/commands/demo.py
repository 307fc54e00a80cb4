"""`perfci demo`."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo_cmd(
        workdir: Path = typer.Option(Path(".perfci/demo"), "--workdir", help="scratch directory (wiped first)"),
        source: Path = typer.Option(Path("."), "--source", help="perfci checkout whose dataplane/ the history is made from"),
        backend: str = typer.Option("auto", "--backend", help="auto (pmu on bare metal, else sim) | pmu | sim | tsc"),
        broker: str = typer.Option("auto", "--broker", help="auto (the local Redis if running, else in-process tasks) | none | URL"),
    ) -> None:
        """Run the whole loop on this machine: history, server, agent, alert, bisect, plots."""
        from ..demo.run import main

        raise typer.Exit(main(workdir.resolve(), source.resolve(), backend, broker))
