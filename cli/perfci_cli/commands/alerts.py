"""``perfci alerts list|show|ack|invalid|fixed|creeps``: regression alerts from the server, triage, and
the creeps (slow moves over many commits) kept apart from them.

Exit status: 0 done; 2 bad input (no such alert, invalid filter, refused token); 3 the server
could not be asked (unreachable, or it failed). ``--json`` prints the server's JSON unchanged.
The helpers here (server options, error handling) are shared by ``perfci check`` and ``compare``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, Optional, TypeVar

import typer

alerts = typer.Typer(help="Regression alerts: list, show, triage (acknowledge / invalid / fixed).", no_args_is_help=True)

T = TypeVar("T")

SERVER_OPTION = typer.Option(None, "--server", help="Server URL (default: $PERFCI_SERVER_URL, then http://127.0.0.1:8000)")
TOKEN_OPTION = typer.Option(None, "--token", help="API token (default: $PERFCI_TOKEN)")
JSON_OPTION = typer.Option(False, "--json", help="Print JSON")


def register(app: typer.Typer) -> None:
    app.add_typer(alerts, name="alerts")


def ask_server(server: str | None, token: str | None, call: Callable[[Any], T], error_exit: int = 2) -> T:
    """Run ``call(client)``; an error answer exits ``error_exit``, no answer exits 3, with a message."""
    from rich.console import Console
    from rich.markup import escape

    from ..client import ApiError, ServerClient, ServerUnreachable

    err = Console(stderr=True)
    try:
        with ServerClient.from_env(server, token) as client:
            return call(client)
    except ServerUnreachable as exc:
        err.print(f"[red]error:[/] server unreachable: {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(3) from None
    except ApiError as exc:
        err.print(f"[red]error:[/] {exc.status} {escape(exc.message)}", soft_wrap=True)
        raise typer.Exit(3 if exc.status >= 500 else error_exit) from None


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2))


def short(sha: str | None) -> str:
    return sha[:10] if sha else "start"


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.2f} %"


def _range(group: dict[str, Any]) -> str:
    last_good = group["last_good"]["sha"] if group["last_good"] else None
    return f"{short(last_good)}..{short(group['first_bad']['sha'])}"


_STYLE = {"regression": "red", "improvement": "green", "untriaged": "bold yellow", "acknowledged": "cyan", "invalid": "dim", "fixed": "green"}


def _title(page: dict[str, Any], offset: int, what: str) -> str:
    shown = f", showing {offset + 1}–{offset + len(page['items'])}" if page["items"] else ""
    return f"{page['total']} {what}{shown}"


def _styled(word: str) -> str:
    style = _STYLE.get(word)
    return f"[{style}]{word}[/]" if style else word


@alerts.command("list")
def list_cmd(
    status: Optional[str] = typer.Option(None, "--status", help="untriaged | acknowledged | invalid | fixed"),
    direction: Optional[str] = typer.Option(None, "--direction", help="regression | improvement"),
    machine_id: Optional[int] = typer.Option(None, "--machine-id"),
    repository_id: Optional[int] = typer.Option(None, "--repository-id"),
    branch: Optional[str] = typer.Option(None, "--branch"),
    config: Optional[str] = typer.Option(None, "--config", help="groups with an alert of this benchmark config"),
    metric: Optional[str] = typer.Option(None, "--metric", help="groups with an alert of this metric"),
    limit: int = typer.Option(50, "--limit", min=1, max=500),
    offset: int = typer.Option(0, "--offset", min=0),
    as_json: bool = JSON_OPTION,
    server: Optional[str] = SERVER_OPTION,
    token: Optional[str] = TOKEN_OPTION,
) -> None:
    """Alert groups, newest first."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    page = ask_server(server, token, lambda c: c.get(
        "/alerts", status=status, direction=direction, machine_id=machine_id, repository_id=repository_id,
        branch=branch, config=config, metric=metric, limit=limit, offset=offset))
    if as_json:
        print_json(page)
        return
    table = Table(title=_title(page, offset, "alert group(s)"))
    for column in ("id", "status", "direction", "machine", "branch", "range", "metrics", "summary"):
        table.add_column(column, overflow="fold")
    for group in page["items"]:
        moved = ", ".join(f"{a['metric']} {pct(a['change_pct'])}" for a in group["alerts"][:4])
        more = len(group["alerts"]) - 4
        table.add_row(str(group["id"]), _styled(group["status"]), _styled(group["direction"]), escape(group["machine"]),
                      escape(group["branch"]), _range(group), moved + (f" +{more}" if more > 0 else ""), escape(group["summary"]))
    Console().print(table)


@alerts.command("creeps")
def creeps_cmd(
    machine_id: Optional[int] = typer.Option(None, "--machine-id"),
    branch: Optional[str] = typer.Option(None, "--branch"),
    metric: Optional[str] = typer.Option(None, "--metric"),
    limit: int = typer.Option(50, "--limit", min=1, max=500),
    offset: int = typer.Option(0, "--offset", min=0),
    as_json: bool = JSON_OPTION,
    server: Optional[str] = SERVER_OPTION,
    token: Optional[str] = TOKEN_OPTION,
) -> None:
    """Creeps, newest first: a level that moved gradually over a range of commits, no single commit to blame."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    page = ask_server(server, token, lambda c: c.get("/alerts/creeps", machine_id=machine_id, branch=branch, metric=metric,
                                                     limit=limit, offset=offset))
    if as_json:
        print_json(page)
        return
    table = Table(title=_title(page, offset, "creep(s)"))
    for column in ("id", "direction", "machine", "branch", "config", "metric", "move", "over commits", "p"):
        table.add_column(column, overflow="fold")
    for creep in page["items"]:
        span = f"{short(creep['first']['sha'])}..{short(creep['last']['sha'])}" + (f" ({creep['commits']})" if creep["commits"] else "")
        table.add_row(str(creep["id"]), _styled(creep["direction"]), escape(creep["machine"]), escape(creep["branch"]),
                      escape(creep["config"]), f"{creep['metric']}/{creep['backend']}", pct(creep["change_pct"]), span,
                      f"{creep['p_value']:.1e}")
    Console().print(table)


@alerts.command("show")
def show_cmd(
    group_id: int = typer.Argument(..., help="Alert group id"),
    as_json: bool = JSON_OPTION,
    server: Optional[str] = SERVER_OPTION,
    token: Optional[str] = TOKEN_OPTION,
) -> None:
    """One alert group: its range, every metric that moved, the lean-model explanation, triage."""
    group = ask_server(server, token, lambda c: c.get(f"/alerts/{group_id}"))
    if as_json:
        print_json(group)
        return
    render_group(group)


def render_group(group: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    console.print(f"[bold]alert group {group['id']}[/]  {_styled(group['direction'])}  {_styled(group['status'])}")
    console.print(escape(group["summary"]), soft_wrap=True)
    first_bad = group["first_bad"]
    console.print(f"repository {escape(group['repository'])}  branch {escape(group['branch'])}  machine {escape(group['machine'])} (id {group['machine_id']})")
    last_good = group["last_good"]
    console.print(f"last good  {last_good['sha'] if last_good else '(series start)'}" + (f"  {escape(last_good['subject'])}" if last_good else ""))
    console.print(f"first bad  {first_bad['sha']}  {escape(first_bad['subject'])}  — {escape(first_bad['author'])}")
    table = Table(title="metrics that moved")
    for column, justify in (("config", "left"), ("metric", "left"), ("backend", "left"), ("before", "right"), ("after", "right"),
                            ("change", "right"), ("p", "right"), ("range", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for a in group["alerts"]:
        table.add_row(escape(a["config"]), a["metric"], a["backend"] + (" (simulated)" if a["backend"] == "sim" else ""),
                      f"{a['before_median']:.6g}", f"{a['after_median']:.6g}", f"[{_STYLE[a['direction']]}]{pct(a['change_pct'])}[/]",
                      "exact" if a["p_value"] is None else f"{a['p_value']:.2g}",
                      f"{short(a['last_good_sha'])}..{short(a['first_bad_sha'])}")
    console.print(table)
    for part in group["explanation"].get("parts", []):
        console.print(f"[bold]why[/] ({escape(part['config'])}, {part['backend']}): cause [bold]{part['cause']}[/] — {escape(part['sentence'])}", soft_wrap=True)
        for d in part.get("decompositions", []):
            shares = ", ".join(f"{c['factor']} {100 * c['share']:.0f} %" for c in d["contributions"] if c.get("share") is not None)
            console.print(f"    {d['target'].upper()} {pct(100 * d['rel_change'])}: {shares}")
    if group["triaged_by"]:
        console.print(f"triaged {group['status']} by {escape(group['triaged_by'])} at {group['triaged_at']}: {escape(group['triage_note'])}")


def _triage(status: str) -> Callable[..., None]:
    def command(
        group_id: int = typer.Argument(..., help="Alert group id"),
        note: str = typer.Option("", "--note", help="Why (kept with the alert)"),
        by: Optional[str] = typer.Option(None, "--by", help="Who (default: $USER)"),
        as_json: bool = JSON_OPTION,
        server: Optional[str] = SERVER_OPTION,
        token: Optional[str] = TOKEN_OPTION,
    ) -> None:
        who = by or os.environ.get("USER") or "perfci-cli"
        group = ask_server(server, token, lambda c: c.post(f"/alerts/{group_id}/triage", json={"status": status, "note": note, "by": who}))
        if as_json:
            print_json(group)
            return
        typer.echo(f"alert group {group['id']}: {group['status']} (by {group['triaged_by']})")

    command.__doc__ = f"Mark an alert group {status}; commit statuses on the forge follow."
    return command


alerts.command("ack")(_triage("acknowledged"))
alerts.command("invalid")(_triage("invalid"))
alerts.command("fixed")(_triage("fixed"))
alerts.command("reopen")(_triage("untriaged"))


@alerts.command("bisect", epilog="Exit status: 0 culprit named; 1 none; 2 bad input; 3 culprit named and a move "
                                 "the other way isolated too; 4 culprit named, a move the other way seen but not isolated.")
def bisect_cmd(
    group_id: int = typer.Argument(..., help="Alert group id"),
    local: bool = typer.Option(False, "--local", help="measure here instead of on the alert's machine"),
    repo: str = typer.Option(".", "--repo", help="--local: git repository holding dataplane/"),
    cache_dir: Optional[str] = typer.Option(None, "--cache-dir", help="--local: worktrees, builds and results"),
    direction: Optional[str] = typer.Option(None, "--direction", help="regression | improvement | any (default: the alert's own)"),
    sim_family: Optional[str] = typer.Option(None, "--sim-family", help="--local, sim: the store-buffer model, when the "
                                             "server does not say which one the alerted results used"),
    as_json: bool = JSON_OPTION,
    server: Optional[str] = SERVER_OPTION,
    token: Optional[str] = TOKEN_OPTION,
) -> None:
    """Bisect an alert group's range on its first regressed metric, hunting the alert's direction."""
    from rich.console import Console

    from perfci_core.analysis.bisect import DIRECTIONS

    from .bisect import _usage, bisect_alert

    if direction is not None and direction not in DIRECTIONS:
        raise typer.Exit(_usage(Console(stderr=True), f"unknown --direction {direction!r}; use {', '.join(DIRECTIONS)}"))
    raise typer.Exit(bisect_alert(group_id, local=local, repo=repo, server=server, token=token, as_json=as_json,
                                  cache_dir=cache_dir, direction=direction, sim_family=sim_family))
