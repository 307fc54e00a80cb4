"""``perfci check --commit SHA``: the CI gate.

Exit status: 1 an untriaged regression alert implicates the commit (it lies in a group's range,
last good .. first bad); 0 measured and analysed on every machine asked about, nothing untriaged;
2 not measured (or not analysed) yet, or a suspected change of the commit is being confirmed
by extra repetitions — try again later; 3 could not ask (server unreachable,
unknown machine, refused token).
"""

from __future__ import annotations

import re
from typing import Optional

import typer

from .alerts import JSON_OPTION, SERVER_OPTION, TOKEN_OPTION, ask_server, print_json

_SHA = re.compile(r"^[0-9a-f]{40}$")


def register(app: typer.Typer) -> None:
    app.command("check")(check)


def check(
    commit: str = typer.Option(..., "--commit", help="Full 40-character sha (CI: $GITHUB_SHA, $CI_COMMIT_SHA)"),
    repository: Optional[str] = typer.Option(None, "--repository", help="Repository name, e.g. acme/dataplane"),
    machine: Optional[str] = typer.Option(None, "--machine", help="Machine name or id (default: every machine)"),
    as_json: bool = JSON_OPTION,
    server: Optional[str] = SERVER_OPTION,
    token: Optional[str] = TOKEN_OPTION,
) -> None:
    """Exit 1 if the commit has an untriaged regression alert, 0 if clean, 2 if not measured yet or being confirmed."""
    from rich.console import Console
    from rich.markup import escape

    sha = commit.strip().lower()
    if not _SHA.match(sha):
        Console(stderr=True).print(f"[red]error:[/] {escape(commit)!r} is not a full sha; use `git rev-parse {escape(commit)}`")
        raise typer.Exit(3)
    result = ask_server(server, token, lambda c: c.get("/alerts/check", commit=sha, repository=repository, machine=machine), error_exit=3)
    if as_json:
        print_json(result)
    else:
        console = Console()
        colour = {"regressed": "red", "clean": "green", "pending": "yellow"}[result["state"]]
        console.print(f"[{colour}]{result['state']}[/] {sha[:12]}: {escape(result['detail'])}", soft_wrap=True)
        for m in result["machines"]:
            console.print(f"  {escape(m['machine'])}: {m['state']} — {escape(m['description'])}")
        for group in result["regressions"]:
            console.print(f"  triage with: perfci alerts show {group['id']}  (then ack | invalid | fixed)")
    raise typer.Exit(result["exit_code"])
