"""``perfci compare BASE HEAD``: every metric of two commits on one machine x config.

Two ways:

- stored results (default): over the server's ``/api/v1/compare``, the analysis core's
  two-sample verdict per metric on what agents uploaded (``--repository``, ``--machine``);
- ``--measure``: both commits built, then measured here interleaved (A B A B ..., the order
  inside each pair drawn from a recorded seed) and decided on the paired differences
  (:mod:`perfci_agent.ab_compare`); the minimum effect comes from the metric's series on this
  machine -- the server's when ``--repository`` and ``--machine`` are given, else the local
  history -- or the fixed floor, and the output says which.

Exit status: 1 a metric got worse with verdict DIFFERENT; 0 otherwise; 2 bad input (unknown
commit, repository, machine or config; with ``--measure`` also a commit that does not build or
run); 3 the server could not be asked.
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
        from ..client import ApiError

        problem = "no" if not found else f"{len(found)} (ids {', '.join(map(str, found))}; pass one id)"
        raise ApiError(404, "not_found", f"{problem} {what} named {wanted!r}")
    return found[0]


def compare(
    base: str = typer.Argument(..., help="Base commit (full sha; with --measure any revision)"),
    head: str = typer.Argument(..., help="Head commit (full sha; with --measure any revision)"),
    repository: Optional[str] = typer.Option(None, "--repository", help="Repository name or id (stored results; with --measure: the series' source)"),
    machine: Optional[str] = typer.Option(None, "--machine", help="Machine name or id (as --repository)"),
    config: str = typer.Option("self-64B", "--config", help="Benchmark config name"),
    measure: bool = typer.Option(False, "--measure", help="Measure both commits here, interleaved, and decide on paired differences"),
    repo: str = typer.Option(".", "--repo", help="--measure: git repository holding dataplane/"),
    backend: str = typer.Option("auto", "--backend", help="--measure: auto | pmu | sim | tsc"),
    pairs: int = typer.Option(10, "--pairs", help="--measure: pairs to start with (10 reach the per-look level of the default budget)"),
    max_pairs: int = typer.Option(26, "--max-pairs", help="--measure: 4 more pairs while the verdict is UNKNOWN, up to this"),
    seed: Optional[int] = typer.Option(None, "--seed", help="--measure: seed of the order inside each pair (default: drawn, and printed)"),
    metric: Optional[list[str]] = typer.Option(None, "--metric", help="--measure: metric(s) to decide on (default: all; the first decides when to add pairs)"),
    min_effect: Optional[float] = typer.Option(None, "--min-effect", help="--measure: relative change below which nothing is DIFFERENT (default: learned from the series)"),
    branch: str = typer.Option("main", "--branch", help="--measure with --repository/--machine: the branch whose series gives the minimum effect"),
    core: Optional[int] = typer.Option(None, "--core", help="--measure: forwarding core"),
    cache_dir: Optional[str] = typer.Option(None, "--cache-dir", help="--measure: worktrees, builds and results (default: REPO/.perfci)"),
    as_json: bool = JSON_OPTION,
    server: Optional[str] = SERVER_OPTION,
    token: Optional[str] = TOKEN_OPTION,
) -> None:
    """Compare two commits metric by metric; exit 1 when one regressed (verdict DIFFERENT)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    if measure:
        _measured(base, head, repository, machine, config, repo, backend, pairs, max_pairs, seed, metric, min_effect, branch,
                  core, cache_dir, as_json, server, token)
        return
    if repository is None or machine is None:
        Console(stderr=True).print("[red]error:[/] stored results need --repository and --machine (or measure here: --measure)")
        raise typer.Exit(2)

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
            verdict = _verdict_cell(m)
            p = "exact" if m["backend"] == "sim" else ("n/a" if m["p_value"] is None else f"{m['p_value']:.2g}")
            table.add_row(m["metric"], m["backend"], f"{m['base_median']:.6g}", f"{m['head_median']:.6g}", pct(m["change_pct"]),
                          p, f"{m['n_base']}/{m['n_head']}", verdict)
        console = Console()
        console.print(table)
        if not result["metrics"]:
            console.print("[yellow]no metric was measured on both commits[/] (machine x config)")
        for side in ("base", "head"):
            if result.get(f"noisy_{side}"):
                console.print(f"[yellow]{side}'s run was marked noisy[/] by its agent (repetitions spread far beyond the "
                              "machine's usual noise): measure the two interleaved here with --measure", soft_wrap=True)
    raise typer.Exit(1 if regressed else 0)


def _series_source(server: str | None, token: str | None, repository: str, machine: str, branch: str, config: str):
    """(metric, backend) -> the server's series of this machine x config along ``branch``.

    The repository and machine are resolved now, before anything is measured (a wrong name exits
    2 at once); a series the server cannot give later becomes a note, and the local history is
    asked next: the measurement is never lost to a server error."""
    from perfci_core.analysis.series import Point

    from ..client import ApiError, ServerClient, ServerUnreachable

    ids = ask_server(server, token, lambda c: (_resolve(c, "/repositories", repository, "repository"),
                                               _resolve(c, "/machines", machine, "machine")))

    def source(metric: str, backend: str):
        where = f"the server's series of {metric}/{backend} on machine {machine} x {config} along {branch}"
        points, after = [], None
        try:
            with ServerClient.from_env(server, token) as client:
                while True:
                    query = {"repository_id": ids[0], "branch": branch, "machine_id": ids[1], "config": config,
                             "metric": metric, "backend": backend, "limit": 5000}
                    page = client.get("/series", **query, **({"after_position": after} if after is not None else {}))
                    points += page["points"]
                    after = page["next_after_position"]
                    if after is None:
                        break
        except (ApiError, ServerUnreachable) as exc:
            return [], f"{where} (not available: {exc})"
        return [Point.of(p["commit"], [s["value"] for s in p["samples"]]) for p in points], where

    return source


def _measured(base: str, head: str, repository: str | None, machine: str | None, config: str, repo: str, backend: str,
              pairs: int, max_pairs: int, seed: int | None, metrics: list[str] | None, min_effect: float | None,
              branch: str, core: int | None,
              cache_dir: str | None, as_json: bool, server: str | None, token: str | None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from perfci_agent.ab_compare import measured_compare
    from perfci_agent.errors import MeasureError
    from perfci_agent.noisy import describe

    err = Console(stderr=True)
    source = _series_source(server, token, repository, machine, branch, config) if repository and machine else None

    def progress(event: str, **kw: Any) -> None:  # one line per step on stderr: runs take seconds each
        if event == "built":
            err.print(f"{kw['side']}: {kw['sha'][:12]} built{' (cached)' if kw['cached'] else ''}")
        elif event == "run":
            err.print(f"pair {kw['pair'] + 1}/{kw['pairs']}: {kw['side']}", highlight=False)
        elif event == "more_pairs":
            err.print(f"{kw['metric']}: undecided after {kw['pairs']} pairs, {kw['more']} more")

    try:
        result = measured_compare(repo, base, head, pairs=pairs, max_pairs=max_pairs, seed=seed, backend=backend,
                                  config=config, metrics=metrics or None, core=core, cache_dir=cache_dir,
                                  series_source=source, min_effect=min_effect, progress=None if as_json else progress)
    except MeasureError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    data = result.to_dict()
    if as_json:
        print_json(data)
    else:
        run = result.run
        console = Console()
        table = Table(title=f"{run.base.commit[:10]} → {run.head.commit[:10]}  measured here, interleaved, "
                            f"{run.pairs} pairs (seed {run.seed}), {escape(config)}, {run.base.backend.value}")
        for column, justify in (("metric", "left"), ("base", "right"), ("head", "right"), ("paired change", "right"),
                                ("p", "right"), ("min effect", "right"), ("verdict", "left")):
            table.add_column(column, justify=justify)  # type: ignore[arg-type]
        for m in data["metrics"]:
            verdict = _verdict_cell(m)
            p = "exact" if m["p_value"] is None else f"{m['p_value']:.2g}"
            effect = m["min_effect"]
            table.add_row(m["metric"], f"{m['base_median']:.6g}", f"{m['head_median']:.6g}", pct(m["change_pct"]), p,
                          f"{100 * effect['value']:.2f} % ({effect['source']})", verdict)
        console.print(table)
        notes = sorted({m["min_effect"]["note"] for m in data["metrics"]})
        for note in notes:
            console.print(f"minimum effect: {escape(note)}", soft_wrap=True)
        for side, doc in (("base", run.base), ("head", run.head)):
            if doc.status != "ok":
                console.print(f"[red]{side} {doc.commit[:12]}: {doc.status}[/]: {escape(doc.reason or '')}", soft_wrap=True)
            elif doc.noisy is not None:
                console.print(f"[yellow]{side}[/] {escape(describe(doc.noisy))}", soft_wrap=True)
    if not result.run.ok:
        raise typer.Exit(2)
    raise typer.Exit(1 if result.regressed else 0)


def _verdict_cell(metric: dict) -> str:
    """A metric's verdict as the tables show it: a difference coloured by whether it is worse."""
    if metric["verdict"] != "different":
        return metric["verdict"]
    return "[red]DIFFERENT (worse)[/]" if metric["worse"] else "[green]DIFFERENT (better)[/]"
