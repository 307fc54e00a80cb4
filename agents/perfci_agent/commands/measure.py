"""``perfci measure``: the CLI face of :mod:`perfci_agent.measure`.

Exit status: 0 ok; 1 the commit did not build or the dataplane failed (a result is still printed);
2 bad input (not a repository, unknown commit, unknown config, a backend this machine cannot run).
Progress goes to stderr, so ``--json`` output on stdout stays a clean document.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from perfci_core import metrics

from ..errors import MeasureError

if TYPE_CHECKING:  # pydantic's models: loaded by a measurement, not by `perfci --help`
    from perfci_core.result import ResultDocument


def summary_rows(doc: ResultDocument) -> list[tuple[str, str, str, float, float, float, int]]:
    """(metric, backend, unit, median, min, max, n) per (metric, backend), catalogue order."""
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    for s in doc.samples:
        for m in s.metrics:
            values[(m.metric, m.backend.value)].append(m.value)
    order = list(metrics.CATALOGUE)
    rows = []
    for (name, backend), vs in sorted(values.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1])):
        rows.append((name, backend, metrics.get(name).unit, statistics.median(vs), min(vs), max(vs), len(vs)))
    return rows


def _fmt(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 1e6:
        return f"{x:.4g}"
    if abs(x) >= 100:
        return f"{x:,.1f}"
    return f"{x:.4g}"


def render(doc: ResultDocument, console: Console) -> None:
    console.print(f"commit [bold]{doc.commit[:12]}[/]  config {doc.config.name}  backend [bold]{doc.backend.value}[/] — {doc.backend_reason}")
    if doc.status != "ok":
        console.print(f"[red]{doc.status}[/]: {doc.reason}")
        if doc.log_tail:
            console.print(doc.log_tail, markup=False, highlight=False)
    if doc.samples:
        table = Table(title=f"{len(doc.samples)} repetition(s) on core {doc.machine.get('core')}")
        for col, just in (("metric", "left"), ("backend", "left"), ("unit", "left"), ("median", "right"), ("min – max", "right")):
            table.add_column(col, justify=just)
        for name, backend, unit, med, lo, hi, _ in summary_rows(doc):
            table.add_row(name, backend + (" (simulated)" if backend == "sim" else ""), unit, _fmt(med), f"{_fmt(lo)} – {_fmt(hi)}")
        console.print(table)
        flagged = sorted({k for s in doc.samples for k, p in s.running_pct.items() if p < 100.0})
        if flagged:
            console.print(f"[yellow]multiplexed (scaled) counts:[/] {', '.join(flagged)}")
        absent = sorted({k for s in doc.samples for k, v in s.raw.items() if v is None})
        if absent:
            console.print(f"absent counters (not supported / not counted): {', '.join(absent)}")
    if doc.config.scaling and doc.samples:
        from perfci_core.analysis.scaling import attribution

        moved = attribution([s.raw for s in doc.samples])
        if moved:
            console.print(f"scaling: {escape(moved)}", soft_wrap=True)
    render_unavailable(doc, console)
    if doc.reused_from is not None:
        r = doc.reused_from
        console.print(f"sim counts reused: the same binary ({doc.build_id}) measured for {r.commit[:12]} at "
                      f"{r.started_at:%Y-%m-%d %H:%M:%S} UTC, with the same config, tool and options", soft_wrap=True)
    if doc.noisy is not None:
        from ..noisy import describe

        console.print(f"[yellow]{escape(describe(doc.noisy))}[/]", soft_wrap=True)
    if not doc.tuning.ok:
        console.print(f"[yellow]host not tuned[/] ({len(doc.tuning.deviations)}): " + "; ".join(doc.tuning.deviations))
    for note in doc.notes:  # physically impossible values, taken out of the result
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)


def _lcore_name(config: str, lcores: int | None, scaling: bool) -> str:
    """A config changed on the command line gets a name of its own (its series is another one)."""
    name = config.removesuffix("-scaling")
    if scaling:
        return f"{name}-scaling" + (f"-{lcores}" if lcores else "")
    return f"{name}-{lcores}lc" if lcores and lcores > 1 else name


def _cores(text: str | None, core: int | None) -> list[int]:
    from ..errors import UsageError
    from ..measure import allowed_cores

    if text is None:
        return allowed_cores(core)
    try:
        listed = [int(c) for c in text.split(",") if c.strip()]
    except ValueError:
        raise UsageError(f"--cores takes CPU numbers separated by commas, got {text!r}") from None
    if not listed or len(set(listed)) != len(listed) or (core is not None and core != listed[0]):
        raise UsageError(f"--cores must list distinct CPUs{', starting with --core' if core is not None else ''}, got {text!r}")
    return listed


def render_unavailable(doc: ResultDocument, console: Console) -> None:
    for what, why in sorted(doc.unavailable.items()):
        console.print(f"{what}: {escape(why)}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    @app.command("measure")
    def measure_cmd(
        repo: str = typer.Option(".", "--repo", help="git repository holding dataplane/"),
        commit: str = typer.Option("HEAD", "--commit", help="revision to measure"),
        backend: str = typer.Option("auto", "--backend", help="auto | pmu | sim | tsc"),
        reps: Optional[int] = typer.Option(None, "--reps", help="repetitions in fresh processes (default: 5; sim: 2)"),
        config: str = typer.Option("self-64B", "--config", help="benchmark configuration name"),
        core: Optional[int] = typer.Option(None, "--core", help="forwarding core (default: PERFCI_CORE, else the highest allowed CPU)"),
        cache_dir: Optional[str] = typer.Option(None, "--cache-dir", help="build cache and kept sim counts (default: REPO/.perfci)"),
        as_json: bool = typer.Option(False, "--json", help="print the result document as JSON"),
        lcores: Optional[int] = typer.Option(None, "--lcores", min=1, max=64,
                                             help="forwarding lcores (with --scaling: the most; default one, or every allowed core)"),
        scaling: bool = typer.Option(False, "--scaling", help="run each repetition at 1, 2, 4, ... N lcores with the calibration loop; "
                                                               "Amdahl's serial fraction from 3 or more counts"),
        cores: Optional[str] = typer.Option(None, "--cores", help="cores to forward on, in order, e.g. 2,3 (default: --core, then every other allowed core)"),
        sim_family: Optional[str] = typer.Option(None, "--sim-family",
                                                 help="sim: store-buffer model intel-icx|intel-spr|intel-skx|amd-zen4 (default: this CPU's)"),
        rebuild: bool = typer.Option(False, "--rebuild", help="drop the commit's cached build (or build failure), build again "
                                     "and simulate again (no reused sim counts)"),
    ) -> None:
        """Build the dataplane at a commit, run it, count, and derive the lean-model metrics."""
        from ..measure import config_named, measure

        err = Console(stderr=True)
        progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=err, transient=True)
        tasks: dict[str, int] = {}

        def on_progress(event: str, **kw) -> None:
            if event == "backend":
                err.print(f"backend: [bold]{kw['backend']}[/] — {escape(kw['reason'])}", soft_wrap=True)
            elif event == "build":
                tasks["build"] = progress.add_task(f"building {kw['sha'][:12]}", total=None)
            elif event == "build_step":
                progress.update(tasks["build"], description=f"build: {kw['step']}")
            elif event == "built":
                progress.update(tasks["build"], description="build: cached" if kw["cached"] else "build: done", total=1, completed=1)
            elif event == "reused":
                err.print(f"sim counts reused from {kw['commit'][:12]} (the same binary, config and tool)")
            elif event == "calibrate":
                tasks["run"] = progress.add_task("running", total=None)
            elif event == "run":
                progress.update(tasks["run"], description=f"run {kw['rep'] + 1}/{kw['reps']}", total=kw["reps"], completed=kw["rep"])
            elif event == "done":
                progress.update(tasks["run"], completed=kw["reps"])

        try:
            cfg = config_named(config)
            if lcores is not None or scaling:
                cfg = cfg.model_copy(update={"lcores": lcores if lcores is not None else cfg.lcores, "scaling": scaling or cfg.scaling})
                cfg = cfg.model_copy(update={"name": _lcore_name(config, cfg.lcores, cfg.scaling)})
            forward_cores = _cores(cores, core)
            with progress:
                doc = measure(repo=repo, commit=commit, backend=backend, reps=reps, config=cfg, core=forward_cores[0],
                              cache_dir=cache_dir, progress=on_progress, sim_family=sim_family, cores=forward_cores,
                              rebuild=rebuild)
        except MeasureError as exc:
            err.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
            raise typer.Exit(2) from None
        if as_json:
            typer.echo(doc.model_dump_json(by_alias=True, indent=2))
        else:
            render(doc, Console())
        raise typer.Exit(0 if doc.status == "ok" else 1)
