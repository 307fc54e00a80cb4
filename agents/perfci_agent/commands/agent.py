"""``perfci agent run|check``: the daemon and its self-check (config keys: docs/operations.md, "Running an agent").

Exit status: ``run`` returns 0 after a stop request (SIGTERM/SIGINT), 1 when it cannot go on
(invalid config, credentials refused, machine changed); ``check`` returns 0 when healthy, 1 when
something is wrong (one line per problem); both return 2 on usage errors (e.g. no such file).
"""

from __future__ import annotations

import json
from typing import Optional

import typer

agent_app = typer.Typer(help="The agent daemon: claim jobs, measure them, upload the results.", no_args_is_help=True)

CONFIG_HELP = "TOML config file; every key can be overridden by PERFCI_AGENT_<KEY> (default: environment only)"


def register(app: typer.Typer) -> None:
    app.add_typer(agent_app, name="agent")


def _setup_logging(level: str) -> None:
    import logging
    import sys

    class CurrentStderr(logging.StreamHandler):
        """Writes to sys.stderr as it is at each record, not as it was at setup: a replaced
        stderr (an embedding program, a test runner) never leaves the handler on a closed stream."""

        @property  # type: ignore[override]
        def stream(self):
            return sys.stderr

        @stream.setter
        def stream(self, _value) -> None:
            pass

    logging.basicConfig(level=level.upper(), handlers=[CurrentStderr()], force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # one line per HTTP request drowns what the agent is doing; failures are logged by the agent
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))


@agent_app.command("run")
def run_cmd(config: Optional[str] = typer.Option(None, "--config", help=CONFIG_HELP)) -> None:
    """Run the agent daemon until SIGTERM (finishes the running repetition, then releases the job)."""
    import logging
    import signal
    import threading

    from ..daemon.agent import Agent, Fatal
    from ..daemon.config import ConfigError, ConfigFileError, load

    try:
        cfg = load(config)
    except ConfigFileError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except ConfigError as exc:
        for problem in exc.problems:
            typer.echo(f"config: {problem}", err=True)
        raise typer.Exit(1) from None
    _setup_logging(cfg.log_level)
    log = logging.getLogger("perfci_agent.daemon")
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("%s received: finishing the running repetition, then stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        code = Agent(cfg, stop).run()
    except Fatal as exc:
        log.error("cannot go on: %s", exc)
        raise typer.Exit(1) from None
    raise typer.Exit(code)


@agent_app.command("check")
def check_cmd(
    config: Optional[str] = typer.Option(None, "--config", help=CONFIG_HELP),
    no_server: bool = typer.Option(False, "--no-server", help="skip the server checks (reachable, token accepted)"),
    as_json: bool = typer.Option(False, "--json", help="print the checks as JSON"),
) -> None:
    """Check this host can run the agent: config, toolchain, directories, token, tuning, server."""
    from rich.console import Console
    from rich.markup import escape

    from ..daemon.check import FAIL, run_checks
    from ..daemon.config import ConfigFileError

    try:
        lines = run_checks(config, with_server=not no_server)
    except ConfigFileError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    healthy = not any(line.status == FAIL for line in lines)
    if as_json:
        typer.echo(json.dumps({"ok": healthy, "checks": [line.as_dict() for line in lines]}, indent=2))
    else:
        console = Console(highlight=False, soft_wrap=True)
        style = {"ok": "green", "warn": "yellow", "fail": "bold red"}
        for line in lines:
            console.print(f"[{style[line.status]}]{line.status:<4}[/] {line.name:<12} {escape(line.detail)}")
        console.print("healthy" if healthy else "[bold red]not healthy[/]")
    raise typer.Exit(0 if healthy else 1)
