"""``perfci compare BASE HEAD``: every metric of two measured commits on one machine x config,
over the server's ``/api/v1/compare`` (the analysis core's two-sample verdict per metric).

Exit status: 1 a metric got worse with verdict DIFFERENT; 0 otherwise; 2 bad input (unknown
commit, repository, machine or config); 3 the server could not be asked.
"""

from __future__ import annotations

from typing import Any, Optional

import typer

from .alerts import JSON_OPTION, SERVER_OPTION, TOKEN_OPTION, ask_server, pct, print_json


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)


def _resolve(client: Any, path: str, wanted: str, what: str) -> int:
    """An id, or the id of the one row named ``wanted`` (names are looked up page by page)."""
    if wanted.isdigit():
        return int(wanted)
    found, offset = [], 0
    while True:
        page = client.get(path, limit=500, offset=offset)
        found += [row["id"] for row in page["items"] if row["name"] == wanted]
        offset += len(page["items"])
        if not page["items"] or offset >= page["total"]:
            break
    if len(found) != 1:
        from ..server_api import ApiError

        problem = "no" if not found else f"{len(found)} (ids {', '.join(map(str, found))}; pass one id)"
        raise ApiError(404, "not_found", f"{problem} {what} named {wanted!r}")
    return found[0]


def compare(
    base: str = typer.Argument(..., help="Base commit (full sha)"),
    head: str = typer.Argument(..., help="Head commit (full sha)"),
    repository: str = typer.Option(..., "--repository", help="Repository name or id"),
    machine: str = typer.Option(..., "--machine", help="Machine name or id"),
    config: str = typer.Option("self-64B", "--config", help="Benchmark config name"),
    as_json: bool = JSON_OPTION,
    server: Optional[str] = SERVER_OPTION,
    token: Optional[str] = TOKEN_OPTION,
) -> None:
    """Compare two commits metric by metric; exit 1 when one regressed (verdict DIFFERENT)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    def call(client: Any) -> dict[str, Any]:
        repository_id = _resolve(client, "/repositories", repository, "repository")
        machine_id = _resolve(client, "/machines", machine, "machine")
        return client.get("/compare", repository_id=repository_id, base=base.lower(), head=head.lower(), machine_id=machine_id, config=config)

    result = ask_server(server, token, call)
    regressed = [m for m in result["metrics"] if m["verdict"] == "different" and m["worse"]]
    if as_json:
        print_json({**result, "regressed": [m["metric"] + "/" + m["backend"] for m in regressed]})
    else:
        table = Table(title=f"{base[:10]} → {head[:10]}  on machine {result['machine_id']}, {escape(config)}")
        for column, justify in (("metric", "left"), ("backend", "left"), ("base", "right"), ("head", "right"), ("change", "right"),
                                ("p", "right"), ("n", "right"), ("verdict", "left")):
            table.add_column(column, justify=justify)  # type: ignore[arg-type]
        for m in result["metrics"]:
            verdict = m["verdict"]
            if verdict == "different":
                verdict = "[red]DIFFERENT (worse)[/]" if m["worse"] else "[green]DIFFERENT (better)[/]"
            p = "exact" if m["backend"] == "sim" else ("n/a" if m["p_value"] is None else f"{m['p_value']:.2g}")
            table.add_row(m["metric"], m["backend"], f"{m['base_median']:.6g}", f"{m['head_median']:.6g}", pct(m["change_pct"]),
                          p, f"{m['n_base']}/{m['n_head']}", verdict)
        console = Console()
        console.print(table)
        if not result["metrics"]:
            console.print("[yellow]no metric was measured on both commits[/] (machine x config)")
    raise typer.Exit(1 if regressed else 0)
