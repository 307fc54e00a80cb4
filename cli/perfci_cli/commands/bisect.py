"""``perfci bisect`` and the implementation behind ``perfci alerts bisect ID``.

Exit status (:func:`exit_status`, the same for local and server bisects):

- 0 the culprit of the hunted kind was found and confirmed, and no move the other way was seen;
- 1 no culprit: no change of the hunted kind between good and bad, or the search was
  inconclusive (ambiguous between unbuildable commits, not confirmed, repetition cap reached);
- 2 bad input (unknown revision, metric, config, backend, direction, machine, alert; server errors);
- 3 the culprit was found, and a move against the hunted kind was seen and isolated too (both
  commits are reported; ``opposing`` in ``--json``);
- 4 the culprit was found, and a move against the hunted kind was seen but not isolated (a note
  names the range where it was seen).

Progress goes to stderr, so ``--json`` on stdout stays one clean document.
"""

from __future__ import annotations

import math
import time
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from perfci_agent.bisect.exit import EXIT_USAGE, exit_status

POLL_SECONDS = 2.0
TERMINAL = ("culprit", "ambiguous", "unconfirmed", "no_change", "inconclusive", "failed")
DIRECTION_HELP = ("what to hunt: regression | improvement | any (any: the kind good -> bad show; "
                  "a given kind is hunted inside the range even when the endpoints show the other)")
EXIT_HELP = ("Exit status: 0 culprit found; 1 no culprit (no change, inconclusive, ambiguous, unconfirmed); 2 bad input; "
             "3 culprit found and a move the other way isolated too; 4 culprit found, a move the other way seen but not isolated.")


class BisectUsage(Exception):
    """Bad input for a bisection (exit status 2)."""


def _progress(console: Console) -> Progress:
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=True)


# --- local ---------------------------------------------------------------------------------------


def run_local(repo: str, good: str, bad: str, metric: str, config: str, backend: str, core: int | None,
              cache_dir: str | None, max_reps: int | None, err: Console, direction: str = "any",
              sim_family: str | None = None) -> dict[str, Any]:
    from perfci_agent.bisect.local import LocalBisect
    from perfci_agent.errors import MeasureError

    progress = _progress(err)
    task = progress.add_task("bisect", total=None)

    def on_event(event: str, **kw: Any) -> None:
        if event == "start":
            progress.update(task, total=kw["bound"], description=f"bisecting {kw['n']} commits")
        elif event == "sample":
            what = "confirming" if kw["fresh"] else "measuring"
            progress.update(task, description=f"{what} {kw['sha'][:12]} (commit {kw['index']}, {kw['count']} rep)")
        elif event == "measure_build":
            progress.update(task, completed=len(bisect.builds))
        elif event == "measure_build_step":
            progress.update(task, description=f"building {kw['sha'][:12]}: {kw['step']}")
        elif event == "profile":
            progress.update(task, description="profiling parent and culprit")

    overrides = {"max_reps": max_reps} if max_reps else None
    try:
        bisect = LocalBisect(repo, good, bad, metric, config=config, backend=backend, core=core, cache_dir=cache_dir,
                             policy_overrides=overrides, progress=on_event, direction=direction, sim_family=sim_family)
        with progress:
            report = bisect.run()
    except (MeasureError, ValueError) as exc:
        raise BisectUsage(str(exc)) from None
    return report.to_dict()


# --- server --------------------------------------------------------------------------------------


def run_on_server(client: Any, body: dict[str, Any], err: Console, timeout: float) -> dict[str, Any]:
    """Create a bisect on the server and follow it until it ends (or ``timeout`` seconds pass)."""
    created = client.post("/bisects", json=body)
    progress = _progress(err)
    task = progress.add_task(f"bisect {created['id']} on {body['machine']}", total=created.get("expected_builds"))
    deadline = time.monotonic() + timeout
    current = created
    with progress:
        while current["status"] not in TERMINAL and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
            current = client.get(f"/bisects/{created['id']}")
            progress.update(task, completed=current.get("builds", 0),
                            description=f"bisect {current['id']}: {current['status']} — {current.get('message') or ''}"[:100])
    if current["status"] not in TERMINAL:
        current = {**current, "message": f"still {current['status']} after {timeout:.0f} s; "
                                         f"follow it with GET /api/v1/bisects/{current['id']}"}
    return current


def _full_sha(rev: str) -> bool:
    return len(rev) == 40 and all(c in "0123456789abcdef" for c in rev.lower())


def resolve_local_shas(repo: str | None, *revs: str) -> list[str]:
    """Full SHAs for the server. A full SHA is taken as it is (the server knows its repository's
    commits; the checkout at hand may not have them); other revisions are resolved in ``repo``."""
    names = [r for r in revs if not _full_sha(r)]
    if names and repo is None:
        raise BisectUsage(f"without --repo, give full commit SHAs to the server (got {', '.join(names)})")
    if not names:
        return [r.lower() for r in revs]
    from perfci_agent.errors import UsageError
    from perfci_agent.workspace import repo_root, resolve_commit

    try:
        root = repo_root(repo)
        return [r.lower() if _full_sha(r) else resolve_commit(root, r) for r in revs]
    except UsageError as exc:
        raise BisectUsage(str(exc)) from None


# --- alerts --------------------------------------------------------------------------------------


def alert_target(alert: dict[str, Any], direction: str | None = None) -> dict[str, Any]:
    """good/bad/metric/config/backend/machine of an alert group (``GET /api/v1/alerts/{id}``):
    its range, on its first regressed metric (its first metric when none regressed); hunting
    ``direction``, by default the alert's own (a regression alert hunts the regression)."""
    if not alert.get("last_good"):
        raise BisectUsage(f"alert {alert.get('id')} starts at the first measured commit: there is no good commit to bisect from")
    rows = alert.get("alerts") or []
    if not rows:
        raise BisectUsage(f"alert {alert.get('id')} lists no metric")
    row = next((r for r in rows if r.get("direction") == "regression"), rows[0])
    return {"good": alert["last_good"]["sha"], "bad": alert["first_bad"]["sha"], "metric": row["metric"],
            "config": row["config"], "backend": row["backend"], "sim_family": row.get("sim_family"), "machine": alert["machine"],
            "repository": alert["repository"], "branch": alert["branch"], "alert_group_id": alert["id"],
            "direction": direction or (row.get("direction") if row.get("direction") in ("regression", "improvement") else "any")}


def local_model(target: dict[str, Any], requested: str | None) -> str | None:
    """The store-buffer model a local bisect of an alert uses: the one its sim results were measured
    with (the alert row's ``sim_family``), never silently this CPU's. ``requested`` (``--sim-family``)
    stands in when the server does not say, and must agree when it does."""
    if target["backend"] != "sim":
        if requested:
            raise BisectUsage(f"--sim-family sets the sim backend's model; alert {target['alert_group_id']} is on {target['backend']}")
        return None
    recorded = target.get("sim_family")
    if recorded and requested and requested != recorded:
        raise BisectUsage(f"alert {target['alert_group_id']}'s results were measured with the {recorded} model, "
                          f"not {requested}: drop --sim-family")
    if not (recorded or requested):
        raise BisectUsage(f"the server does not say which store-buffer model alert {target['alert_group_id']}'s sim results "
                          f"used, and this CPU's may differ: give --sim-family (the agent's sim_family)")
    return recorded or requested


def bisect_alert(alert_id: int, *, local: bool = False, repo: str = ".", server: str | None = None,
                 token: str | None = None, as_json: bool = False, cache_dir: str | None = None,
                 core: int | None = None, timeout: float = 24 * 3600.0, direction: str | None = None,
                 sim_family: str | None = None) -> int:
    """``perfci alerts bisect ID``: bisect an alert's range on its first regressed metric, on the
    server (the alert's machine; default) or here (``local``, on sim with the alerted results' model).
    Returns the exit status."""
    from ..client import ApiError, ServerClient, ServerUnreachable

    err = Console(stderr=True)
    if sim_family and not local:
        return _usage(err, "--sim-family is for a local bisect: on the server, the alert's machine uses its own model")
    try:
        with ServerClient.from_env(server, token) as client:
            target = alert_target(client.get(f"/alerts/{alert_id}"), direction)
            err.print(f"alert {alert_id}: {target['direction']} of {target['metric']} ({target['backend']}) on {target['config']}, "
                      f"{target['good'][:12]}..{target['bad'][:12]} on {escape(target['machine'])}")
            if local:
                result = run_local(repo, target["good"], target["bad"], target["metric"], target["config"],
                                   target["backend"], core, cache_dir, None, err, target["direction"],
                                   local_model(target, sim_family))
            else:
                result = run_on_server(client, _server_body(target), err, timeout)
    except BisectUsage as exc:
        return _usage(err, str(exc))
    except ApiError as exc:
        return _usage(err, f"server: {exc}")
    except ServerUnreachable as exc:
        return _usage(err, f"server unreachable: {exc}")
    return _finish(result, as_json)


def _server_body(t: dict[str, Any]) -> dict[str, Any]:
    keys = ("repository", "branch", "good", "bad", "machine", "config", "metric", "backend", "alert_group_id", "direction")
    return {k: t[k] for k in keys if t.get(k) is not None}


# --- output ----------------------------------------------------------------------------------------


def _usage(err: Console, message: str) -> int:
    err.print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
    return EXIT_USAGE


def _finish(result: dict[str, Any], as_json: bool) -> int:
    import json

    if as_json:
        typer.echo(json.dumps(result, indent=2, default=str))
    else:
        render(result, Console())
    return exit_status(result)


def render(r: dict[str, Any], console: Console) -> None:
    colour = {"culprit": "green", "no_change": "yellow"}.get(r["status"], "red")
    console.print(f"[{colour}]{r['status']}[/]: {escape(r.get('message') or '')}", soft_wrap=True)
    culprit, change = r.get("culprit"), r.get("change")
    if culprit:
        console.print(f"culprit  [bold]{culprit['sha']}[/]  {escape(culprit.get('author', ''))}\n         {escape(culprit.get('subject', ''))}")
    if r.get("sim_family"):
        console.print(f"store-buffer model: {r['sim_family']}")
    if change and change.get("before_median") is not None and change.get("after_median") is not None:
        conf = "exact rule (deterministic)" if change.get("exact") else f"p = {change['p_value']:.3g}"
        console.print(f"{r['metric']} ({r['backend']}): {change['before_median']:.6g} -> {change['after_median']:.6g} "
                      f"({_size(change.get('change_pct'))}, {change['kind']}), {conf}")
    for m in r.get("opposing") or []:
        _render_move(m, console)
    if "builds" in r:
        n = r.get("range_length") or 2
        reused = f"+{r['reused_repetitions']} repetitions reused" if "reused_repetitions" in r else f"{r.get('reused', 0)} commits' stored results reused"
        console.print(f"builds {r['builds']}, repetitions {r['repetitions']} ({reused}); "
                      f"range of {n} commits, ceil(log2 {n}) = {math.ceil(math.log2(n))}")
    for p in r.get("profiles") or []:
        if not p["available"]:
            console.print(f"{p['tool']}: unavailable — {escape(p['reason'])}", soft_wrap=True)
            continue
        if not p["functions"]:
            console.print(f"{p['tool']}: nothing moved ({escape(p['reason'])})", soft_wrap=True)
            continue
        table = Table(title=f"functions that moved most ({p['tool']}, {p['unit']})")
        for col in ("function", "parent", "culprit", "change"):
            table.add_column(col, justify="left" if col == "function" else "right")
        for f in p["functions"]:
            table.add_row(escape(f["function"]), f"{f['before']:.3f}", f"{f['after']:.3f}", f"{f['delta']:+.3f}")
        console.print(table)


def _size(change_pct: float | None) -> str:
    """A change in % as the JSON carries it (None: the old value was 0, the ratio is infinite)."""
    return f"{change_pct:+.3f} %" if change_pct is not None else "from zero"


def _render_move(m: dict[str, Any], console: Console) -> None:
    """One move against the hunted kind: where it was seen, and its own culprit when isolated."""
    def sha(ref: dict[str, Any] | None) -> str:
        return (ref or {}).get("sha", "?")[:12]

    seen = f"{m['kind']} {_size(m.get('change_pct'))} seen between {sha(m.get('good'))} and {sha(m.get('bad'))}"
    if m.get("dismissed"):
        console.print(f"[dim]{seen}: not seen again in fresh repetitions, not counted[/]", soft_wrap=True)
    elif m.get("status") == "culprit":
        culprit = m.get("culprit") or {}
        change = m.get("change") or {}
        pct = f" ({_size(change.get('change_pct'))})" if change.get("before_median") is not None else ""
        console.print(f"[yellow]also[/] {seen}: isolated at [bold]{culprit.get('sha', '?')}[/]{pct}  "
                      f"{escape(culprit.get('subject', ''))}", soft_wrap=True)
    elif m.get("isolated"):
        console.print(f"[yellow]also[/] {seen}: the isolated one above lies inside it", soft_wrap=True)
    else:
        why = f" — {m['status']}: {escape(m.get('message') or '')}" if m.get("status") else ""
        console.print(f"[red]also[/] {seen}: not isolated{why}", soft_wrap=True)


# --- the command -------------------------------------------------------------------------------------


def register(app: typer.Typer) -> None:
    @app.command("bisect", epilog=EXIT_HELP)
    def bisect_cmd(
        good: Optional[str] = typer.Option(None, "--good", help="a revision at the old level"),
        bad: Optional[str] = typer.Option(None, "--bad", help="a revision at the new level"),
        metric: Optional[str] = typer.Option(None, "--metric", help="metric name, e.g. ipp, cpp, eipc"),
        direction: Optional[str] = typer.Option(None, "--direction", help=DIRECTION_HELP + " (default: any; "
                                                "with --alert, the alert's own)"),
        config: str = typer.Option("self-64B", "--config", help="benchmark configuration name"),
        backend: str = typer.Option("auto", "--backend", help="auto | pmu | sim | tsc"),
        local: bool = typer.Option(False, "--local", help="measure on this machine (the default without --machine)"),
        machine: Optional[str] = typer.Option(None, "--machine", help="run on the server, on this machine's agents"),
        alert: Optional[int] = typer.Option(None, "--alert", help="bisect the range of this alert group"),
        repo: str = typer.Option(".", "--repo", help="git repository holding dataplane/"),
        repository: Optional[str] = typer.Option(None, "--repository", help="--machine: the repository's name on the server"),
        branch: str = typer.Option("main", "--branch", help="--machine: the branch the range is on"),
        max_reps: Optional[int] = typer.Option(None, "--max-reps", help="cap on repetitions per commit (default: sim 3, others 40)"),
        core: Optional[int] = typer.Option(None, "--core", help="forwarding core (default: the highest allowed CPU)"),
        cache_dir: Optional[str] = typer.Option(None, "--cache-dir", help="worktrees, builds and results (default: REPO/.perfci)"),
        timeout: float = typer.Option(24 * 3600.0, "--timeout", help="--machine: stop following after this many seconds"),
        server: Optional[str] = typer.Option(None, "--server", help="server URL (default: $PERFCI_SERVER_URL)"),
        token: Optional[str] = typer.Option(None, "--token", help="API token (default: $PERFCI_TOKEN)"),
        as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
        sim_family: Optional[str] = typer.Option(None, "--sim-family", help="local, sim: store-buffer model "
                                                 "intel-icx|intel-spr|intel-skx|amd-zen4 (default: this CPU's; with --alert, "
                                                 "the alerted results')"),
    ) -> None:
        """Find the commit between --good and --bad that moved --metric (and which functions moved);
        with --direction, the commit that moved it that way, reporting any move the other way too."""
        from perfci_core.analysis.bisect import DIRECTIONS  # scipy: loaded when a bisect runs, not for --help

        err = Console(stderr=True)
        if direction is not None and direction not in DIRECTIONS:
            raise typer.Exit(_usage(err, f"unknown --direction {direction!r}; use {', '.join(DIRECTIONS)}"))
        if local and machine:
            raise typer.Exit(_usage(err, "--local and --machine exclude each other"))
        if machine and sim_family:
            raise typer.Exit(_usage(err, "--sim-family is for a local bisect: on --machine, the agents use their own model"))
        if alert is not None:
            if good or bad or metric:
                raise typer.Exit(_usage(err, "--alert takes the range and metric from the alert; drop --good/--bad/--metric"))
            raise typer.Exit(bisect_alert(alert, local=not machine and local, repo=repo, server=server, token=token,
                                          as_json=as_json, cache_dir=cache_dir, core=core, timeout=timeout,
                                          direction=direction, sim_family=sim_family))
        missing = [name for name, value in (("--good", good), ("--bad", bad), ("--metric", metric)) if not value]
        if missing:
            raise typer.Exit(_usage(err, f"missing {', '.join(missing)}"))
        try:
            if machine:
                raise typer.Exit(_on_server(err, repo, repository, branch, good, bad, machine, config, metric, backend,
                                            server, token, timeout, as_json, direction or "any"))
            result = run_local(repo, good, bad, metric, config, backend, core, cache_dir, max_reps, err, direction or "any",
                               sim_family)
        except BisectUsage as exc:
            raise typer.Exit(_usage(err, str(exc))) from None
        raise typer.Exit(_finish(result, as_json))


def _on_server(err: Console, repo: str, repository: str | None, branch: str, good: str, bad: str, machine: str,
               config: str, metric: str, backend: str, server: str | None, token: str | None, timeout: float,
               as_json: bool, direction: str = "any") -> int:
    from pathlib import Path

    from ..client import ApiError, ServerClient, ServerUnreachable

    if not repository:
        return _usage(err, "--machine needs --repository (the repository's name on the server)")
    local_repo = repo if (Path(repo) / ".git").exists() or repo != "." else None
    good_sha, bad_sha = resolve_local_shas(local_repo, good, bad)
    body = {"repository": repository, "branch": branch, "good": good_sha, "bad": bad_sha, "machine": machine,
            "config": config, "metric": metric, "backend": backend, "direction": direction}
    try:
        with ServerClient.from_env(server, token) as client:
            result = run_on_server(client, body, err, timeout)
    except ApiError as exc:
        return _usage(err, f"server: {exc}")
    except ServerUnreachable as exc:
        return _usage(err, f"server unreachable: {exc}")
    return _finish(result, as_json)
