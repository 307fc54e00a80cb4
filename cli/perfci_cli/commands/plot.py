"""``perfci plot``: one metric's trend as a PNG, for people without Grafana (and for the demo).

The same picture as the Metric trend dashboard: the median of the repetitions at each commit, the
min-max band of the repetitions, and the alerts marked at their first bad commit. x is the
commit's position on the branch (commit order, not time); a few ticks carry the short sha.

Data comes over HTTP only: ``GET /api/v1/series`` (every sample, paged by branch position) and
``GET /api/v1/alerts``. A server without the alerts API still gets its plot, with a warning
that there are no alert markers. Rendering (:func:`render_trend`) is a pure function of that
data, so it is tested without a server.

Exit status: 0 written; 1 the server failed or could not be reached; 2 bad input (unknown
metric, machine, repository, branch or config, a bad --since, or no measurements to plot).
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from perfci_core import metrics

BACKEND_PREFERENCE = ("pmu", "tsc", "sim")  # real counters first; sim is simulated, never mixed
_PAGE = 500


class PlotError(Exception):
    """Bad input: exit 2 with this message."""


@dataclass
class PlotSummary:
    output: str
    metric: str
    backend: str
    machine: str
    config: str
    branch: str
    points: int
    alerts: int
    first_position: int | None
    last_position: int | None
    warnings: list[str] = field(default_factory=list)


# --- rendering (pure) -------------------------------------------------------------------------


def point_stats(series: dict[str, Any]) -> list[tuple[int, str, float, float, float]]:
    """(position, sha, min, median, max) per commit of an API series document."""
    rows = []
    for point in series["points"]:
        values = [s["value"] for s in point["samples"]]
        if values:
            rows.append((point["position"], point["commit"], min(values), statistics.median(values), max(values)))
    return rows


def alert_marks(groups: list[dict[str, Any]], config: str, metric: str, backend: str) -> list[dict[str, Any]]:
    """The alerts of these groups on this series: position, direction, status, change, group id."""
    marks = []
    for group in groups:
        first_bad = group.get("first_bad") or {}
        for alert in group.get("alerts", []):
            if (alert.get("config"), alert.get("metric"), alert.get("backend")) == (config, metric, backend):
                marks.append({"position": first_bad.get("position"), "direction": alert.get("direction", group.get("direction")),
                              "status": group.get("status", ""), "change_pct": alert.get("change_pct"), "group": group.get("id")})
    return [m for m in marks if m["position"] is not None]


def render_trend(series: dict[str, Any], marks: list[dict[str, Any]], output: Path, *, title: str,
                 width_px: int = 1200, height_px: int = 500, dpi: int = 100) -> None:
    """Draw median + min-max band + alert markers to a PNG of exactly width_px x height_px."""
    figure = draw_trend(series, marks, title=title, width_px=width_px, height_px=height_px, dpi=dpi)
    figure.savefig(output, format="png", dpi=dpi)


_LABEL_GAP_PX = 3


def draw_trend(series: dict[str, Any], marks: list[dict[str, Any]], *, title: str, width_px: int = 1200,
               height_px: int = 500, dpi: int = 100):
    """The trend as a matplotlib Figure. Alert labels sit in a band above the data: rows at the top
    of the axes, each label in the highest row where it overlaps no other (measured with the
    renderer), and the y range raised so that every data point stays below the lowest row."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.transforms import blended_transform_factory

    rows = point_stats(series)
    if not rows:
        raise PlotError("no measurements to plot")
    positions = [r[0] for r in rows]
    figure = Figure(figsize=(width_px / dpi, height_px / dpi), dpi=dpi)
    FigureCanvasAgg(figure)  # the renderer that measures the labels is the one that draws them
    axes = figure.add_subplot()
    axes.fill_between(positions, [r[2] for r in rows], [r[4] for r in rows], color="tab:blue", alpha=0.2,
                      linewidth=0, label="min–max of repetitions")
    axes.plot(positions, [r[3] for r in rows], color="tab:blue", linewidth=1.4, marker="o", markersize=2.5,
              label="median")
    by_position = {r[0]: r for r in rows}
    for mark in marks:
        colour = "tab:red" if mark["direction"] == "regression" else "tab:green"
        axes.axvline(mark["position"], color=colour, linestyle="--", linewidth=1, alpha=0.8)
        if mark["position"] in by_position:
            axes.plot([mark["position"]], [by_position[mark["position"]][3]], linestyle="none", color=colour,
                      marker="v" if mark["direction"] == "regression" else "^", markersize=9)
    ticks = positions[:: max(1, len(positions) // 8)]
    axes.set_xticks(ticks, [f"{p}\n{by_position[p][1][:7]}" for p in ticks], fontsize=8)
    definition = metrics.get(series["metric"])
    axes.set_xlabel(f"commit position on {series['branch']} (commit order)")
    axes.set_ylabel(f"{series['metric']} [{definition.unit}] ({definition.direction.value} is better)")
    axes.set_title(title, fontsize=11, loc="left")
    axes.grid(True, alpha=0.3)
    # Above the axes, right: inside it would cover data or the alert labels.
    axes.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=2, fontsize=8, frameon=False, borderaxespad=0.2)
    figure.tight_layout()  # before the labels: they live inside the axes, the layout stays
    _place_alert_labels(figure, axes, marks, low=min(r[2] for r in rows), high=max(r[4] for r in rows),
                        transform=blended_transform_factory(axes.transData, axes.transAxes))
    return figure


def _place_alert_labels(figure, axes, marks: list[dict[str, Any]], *, low: float, high: float, transform) -> None:
    renderer = figure.canvas.get_renderer()
    axes_box = axes.get_window_extent(renderer)
    taken: list[list[tuple[float, float]]] = []  # per row, the x extents (pixels) of its labels
    row_height = 0.0
    for mark in sorted(marks, key=lambda m: m["position"]):
        colour = "tab:red" if mark["direction"] == "regression" else "tab:green"
        change = f" {mark['change_pct']:+.2f}%" if mark.get("change_pct") is not None else ""
        label = axes.text(mark["position"], 1.0, f"#{mark['group']} {mark['status']}{change}", transform=transform,
                          fontsize=8, color=colour, va="top", ha="left", clip_on=False,
                          bbox={"boxstyle": "square,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85})
        extent = label.get_window_extent(renderer)
        if extent.x1 > axes_box.x1:  # near the right edge: the label ends at its line instead
            label.set_ha("right")
            extent = label.get_window_extent(renderer)
        row_height = max(row_height, extent.height + 2 * _LABEL_GAP_PX)  # room for the backgrounds
        span = (extent.x0 - _LABEL_GAP_PX, extent.x1 + _LABEL_GAP_PX)
        row = next((i for i, used in enumerate(taken) if all(span[1] <= a or span[0] >= b for a, b in used)), len(taken))
        if row == len(taken):
            taken.append([])
        taken[row].append(span)
        label.set_y(1.0 - (_LABEL_GAP_PX + row * row_height) / axes_box.height)
    spread = (high - low) or abs(high) or 1.0
    bottom = low - 0.05 * spread
    if not taken:
        axes.set_ylim(bottom, high + 0.05 * spread)
        return
    band = (_LABEL_GAP_PX + len(taken) * row_height + 2 * _LABEL_GAP_PX) / axes_box.height
    if band >= 0.9:
        band = 0.9  # more rows than the plot holds: the data keeps the lower tenth
    # high maps to the axes fraction (1 - band): ylim top = bottom + (high - bottom) / (1 - band).
    axes.set_ylim(bottom, bottom + (high - bottom) / (1 - band))


# --- fetching (HTTP) --------------------------------------------------------------------------


def _find(client, path: str, name: str, what: str, **params: Any) -> dict[str, Any]:
    items, offset = [], 0
    while True:
        page = client.get(path, limit=500, offset=offset, **params)
        items += page["items"]
        offset += len(page["items"])
        if not page["items"] or offset >= page["total"]:
            break
    for item in items:
        if item["name"] == name:
            return item
    known = ", ".join(sorted(i["name"] for i in items)[:20]) or "none"
    raise PlotError(f"no {what} {name!r}; known: {known}")


def _repository(client, name: str | None) -> dict[str, Any]:
    if name:
        return _find(client, "/repositories", name, "repository")
    page = client.get("/repositories", limit=2)
    if page["total"] != 1:
        names = ", ".join(r["name"] for r in page["items"]) or "none"
        raise PlotError(f"{page['total']} repositories on the server ({names}...): pass --repository")
    return page["items"][0]


def fetch_series(client, repository_id: int, branch: str, machine_id: int, config: str, metric: str,
                 backend: str) -> dict[str, Any]:
    """Every page of the series, merged into one document."""
    from ..client import ApiError

    merged: dict[str, Any] | None = None
    after = None
    while True:
        try:
            page = client.get("/series", repository_id=repository_id, branch=branch, machine_id=machine_id, config=config,
                              metric=metric, backend=backend, after_position=after, limit=_PAGE)
        except ApiError as exc:
            if exc.status == 404:
                raise PlotError(exc.message) from None
            raise
        if merged is None:
            merged = page
        else:
            merged["points"] += page["points"]
        after = page.get("next_after_position")
        if after is None:
            return merged


def fetch_alert_groups(client, **filters: Any) -> tuple[list[dict[str, Any]], str | None]:
    """Alert groups for the series, or ([], warning) when the server has no alerts API."""
    from ..client import ApiError

    groups, offset = [], 0
    try:
        while True:
            page = client.get("/alerts", limit=500, offset=offset, **filters)
            groups += page["items"]
            offset += len(page["items"])
            if not page["items"] or offset >= page["total"]:
                return groups, None
    except ApiError as exc:
        # A route the server does not have answers FastAPI's own 404/405 ("http_error"); a
        # perfci 404 ("not_found") is a real answer and is raised like any other error.
        if exc.status in (404, 405) and exc.code == "http_error":
            return [], f"the server has no alerts API (GET /api/v1/alerts: {exc.status}): no alert markers"
        raise


def parse_since(since: str | None, now: datetime) -> datetime | None:
    """``2026-06-01`` / an ISO datetime, or a relative ``30d`` / ``12w`` / ``6h``."""
    if not since:
        return None
    match = re.fullmatch(r"(\d+)([hdw])", since.strip())
    if match:
        return now - timedelta(**{{"h": "hours", "d": "days", "w": "weeks"}[match.group(2)]: int(match.group(1))})
    try:
        moment = datetime.fromisoformat(since)
    except ValueError:
        raise PlotError(f"--since {since!r}: expected a date (2026-06-01), a datetime, or 30d / 12w / 6h") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def keep_since(series: dict[str, Any], since: datetime | None) -> dict[str, Any]:
    if since is None:
        return series
    kept = [p for p in series["points"] if p.get("committed_at") and datetime.fromisoformat(p["committed_at"]) >= since]
    return {**series, "points": kept}


def plot(client, *, metric: str, machine: str, config: str, branch: str, repository: str | None, backend: str,
         since: str | None, output: Path, width: int, height: int, now: datetime | None = None) -> PlotSummary:
    try:
        definition = metrics.get(metric)
    except KeyError as exc:
        raise PlotError(str(exc.args[0])) from None
    since_at = parse_since(since, now or datetime.now(UTC))
    repo = _repository(client, repository)
    machine_row = _find(client, "/machines", machine, "machine")
    _find(client, "/configs", config, "config")
    candidates = [b for b in BACKEND_PREFERENCE if b in {x.value for x in definition.backends}]
    if backend != "auto":
        if backend not in candidates:
            raise PlotError(f"{metric} is not measured by backend {backend!r}; it is by: {', '.join(candidates)}")
        candidates = [backend]
    series = None
    for candidate in candidates:
        series = fetch_series(client, repo["id"], branch, machine_row["id"], config, metric, candidate)
        if series["points"]:
            break
    assert series is not None
    series = keep_since(series, since_at)
    if not series["points"]:
        raise PlotError(f"no {metric} measurements of {machine} / {config} on {repo['name']} {branch}"
                        + (f" since {since_at:%Y-%m-%d %H:%M}" if since_at else "")
                        + f" (backends tried: {', '.join(candidates)})")
    groups, warning = fetch_alert_groups(client, repository_id=repo["id"], branch=branch, machine_id=machine_row["id"],
                                         config=config, metric=metric)
    first, last = series["points"][0]["position"], series["points"][-1]["position"]
    marks = [m for m in alert_marks(groups, config, metric, series["backend"]) if first <= m["position"] <= last]
    title = f"{metric} ({series['backend']}{', simulated' if series['backend'] == 'sim' else ''}) — {machine} / {config} — {repo['name']} {branch}"
    render_trend(series, marks, output, title=title, width_px=width, height_px=height)
    return PlotSummary(str(output), metric, series["backend"], machine, config, branch, len(series["points"]), len(marks),
                       first, last, [warning] if warning else [])


def register(app: typer.Typer) -> None:
    @app.command("plot")
    def plot_cmd(
        metric: str = typer.Option(..., "--metric", help="metric from the catalogue (pps, cpp, ipp, eipc, cur, ...)"),
        machine: str = typer.Option(..., "--machine", help="machine name"),
        output: Path = typer.Option(..., "-o", "--output", help="PNG file to write"),
        config: str = typer.Option("self-64B", "--config", help="benchmark configuration name"),
        branch: str = typer.Option("main", "--branch", help="branch whose commit order is the x axis"),
        repository: Optional[str] = typer.Option(None, "--repository", help="repository name (default: the only one)"),
        backend: str = typer.Option("auto", "--backend", help="auto (pmu, then tsc, then sim) | pmu | tsc | sim"),
        since: Optional[str] = typer.Option(None, "--since", help="only commits since a date (2026-06-01) or 30d / 12w"),
        width: int = typer.Option(1200, "--width", min=300, max=8000, help="image width in pixels"),
        height: int = typer.Option(500, "--height", min=200, max=8000, help="image height in pixels"),
        as_json: bool = typer.Option(False, "--json", help="print what was drawn as JSON"),
        server: Optional[str] = typer.Option(None, "--server", help="server URL (default PERFCI_SERVER_URL)"),
        token: Optional[str] = typer.Option(None, "--token", help="API token (default PERFCI_TOKEN)"),
    ) -> None:
        """Plot one metric's trend (median, repetition band, alert markers) to a PNG."""
        from ..client import ApiError, ServerClient, ServerUnreachable

        err = Console(stderr=True)
        if output.suffix.lower() != ".png":
            err.print(f"[red]error:[/] {escape(str(output))}: the output must be a .png file")
            raise typer.Exit(2)
        try:
            with ServerClient.from_env(server, token) as client:
                summary = plot(client, metric=metric, machine=machine, config=config, branch=branch, repository=repository,
                               backend=backend, since=since, output=output, width=width, height=height)
        except PlotError as exc:
            err.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
            raise typer.Exit(2) from None
        except (ApiError, ServerUnreachable) as exc:
            err.print(f"[red]server error:[/] {escape(str(exc))}", soft_wrap=True)
            raise typer.Exit(1) from None
        for warning in summary.warnings:
            err.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
        if as_json:
            typer.echo(json.dumps(asdict(summary), indent=2))
        else:
            Console().print(f"wrote {escape(summary.output)}: {summary.points} commits (positions {summary.first_position}"
                            f"–{summary.last_position}), {summary.alerts} alert marker(s), backend {summary.backend}")
