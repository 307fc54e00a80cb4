"""Building blocks shared by the dashboard factories: variables, the min-median-max band, tables
with links, and SQL fragments generated from the metric catalogue (one source of truth for
metric names, units and better-directions)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import stat, table, timeseries, trend
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    DynamicConfigValue,
    VariableOption,
    VariableRefresh,
    VariableSort,
)

from perfci_core import metrics as catalogue

from .sql_query import DATASOURCE, SqlQueryBuilder

LEAN_HEADLINE = ("pps", "cpp", "ipp", "eipc")
LEAN_FACTORS = ("pps", "cur", "eipc", "ipp")
PER_PACKET_COUNTERS = ("cache_misses_pp", "l1d_misses_pp", "llc_misses_pp", "branch_misses_pp")
# Stalls that cost cycles, not instructions (pmu: store-forward blocks; sim: all four, simulated)
MEMORY_HAZARDS = ("sf_blocks_pp", "split_loads_pp", "split_stores_pp", "alias_4k_pp", "nt_reloads_pp", "line_transfers_pp",
                  "read_transfers_pp")

TREND_UID = "perfci-trend"


def dashboard(uid: str, title: str, description: str, time_from: str = "now-90d") -> db.Dashboard:
    return (
        db.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["perfci"])
        .editable()
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .time(time_from, "now")
        .timezone("browser")
        .refresh("")
    )


def sql(raw_sql: str, ref_id: str = "A") -> SqlQueryBuilder:
    return SqlQueryBuilder(dedent_sql(raw_sql)).ref_id(ref_id)


def dedent_sql(text: str) -> str:
    return "\n".join(line.strip() for line in text.strip().splitlines())


def quoted(values: tuple[str, ...] | list[str]) -> str:
    """A SQL list of string literals (the values are catalogue names, never user input)."""
    return ", ".join(f"'{v}'" for v in values)


def directions_values() -> str:
    """The catalogue's better-direction per metric as a SQL VALUES list (metric, better)."""
    rows = ", ".join(f"('{m.name}', '{m.direction.value}')" for m in catalogue.CATALOGUE.values())
    return f"(VALUES {rows}) AS d(metric, better)"


def grafana_unit(metric: str) -> str:
    unit = catalogue.get(metric).unit
    if unit == "packets/s":
        return "pps"
    if unit == "ratio":
        return "percentunit"
    return f"suffix: {unit}"


# --- variables --------------------------------------------------------------------------------


def query_variable(name: str, label: str, query: str, *, multi: bool = False, include_all: bool = False,
                   description: str = "") -> db.QueryVariable:
    variable = (
        db.QueryVariable(name)
        .label(label)
        .description(description or label)
        .datasource(DATASOURCE)
        .query(dedent_sql(query))
        .refresh(VariableRefresh.ON_DASHBOARD_LOAD)
        .sort(VariableSort.DISABLED)
    )
    if multi:
        variable = variable.multi(True)
    if include_all:
        variable = variable.include_all(True)
    return variable


def branch_variable() -> db.QueryVariable:
    # main/master first: Grafana selects the first option by default.
    return query_variable("branch", "Branch", """
        SELECT branch_id AS __value, repository || ' ' || branch AS __text
        FROM dash_branches
        ORDER BY branch IN ('main', 'master') DESC, repository, branch
    """, description="Repository and branch: series follow the commit order on this branch")


def machine_variable(multi: bool = False) -> db.QueryVariable:
    variable = query_variable("machine", "Machine", """
        SELECT machine_id AS __value, name AS __text FROM dash_machines ORDER BY enabled DESC, name
    """, multi=multi, include_all=multi, description="Machine (one hardware fingerprint)")
    return variable.current(VariableOption(selected=True, text="All", value="$__all")) if multi else variable


def config_variable() -> db.QueryVariable:
    return query_variable("config", "Config", """
        SELECT config_id AS __value, name AS __text FROM dash_configs ORDER BY enabled DESC, name
    """, description="Benchmark configuration")


def backend_variable() -> db.QueryVariable:
    # pmu first (real counters), then tsc, then sim (simulated: never mixed with pmu).
    return query_variable("backend", "Backend", """
        SELECT backend FROM dash_series_backends
        WHERE machine_id = ${machine:sqlstring} AND config_id = ${config:sqlstring}
        ORDER BY backend = 'pmu' DESC, backend = 'tsc' DESC, backend
    """, description="Measurement backend: pmu counters, tsc timing, or sim (valgrind, simulated)")


def metric_variable() -> db.CustomVariable:
    names = list(catalogue.CATALOGUE)
    return (
        db.CustomVariable("metric")
        .label("Metric")
        .description("Metric from the catalogue (core/perfci_core/metrics.py)")
        .values(",".join(names))
        .current(VariableOption(selected=True, text="cpp", value="cpp"))
    )


# --- panels -----------------------------------------------------------------------------------


def _band_overrides(panel):  # the band: min and max as a filled range around the median
    hidden_line = [DynamicConfigValue(id_val="custom.lineWidth", value=0),
                   DynamicConfigValue(id_val="custom.showPoints", value="never"),
                   DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": "blue"})]
    return (
        panel.override_by_name("max", [*hidden_line, DynamicConfigValue(id_val="custom.fillBelowTo", value="min"),
                                       DynamicConfigValue(id_val="custom.fillOpacity", value=20),
                                       DynamicConfigValue(id_val="displayName", value="max of repetitions")])
        .override_by_name("min", [*hidden_line, DynamicConfigValue(id_val="displayName", value="min of repetitions")])
        .override_by_name("median", [DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": "dark-blue"}),
                                     DynamicConfigValue(id_val="custom.lineWidth", value=2)])
    )


def _panel(panel, title: str, description: str, target: SqlQueryBuilder):
    """What every panel has: title, description, the perfci datasource, its one SQL query."""
    return panel.title(title).description(description).datasource(DATASOURCE).with_target(target)


def _band(panel, title: str, description: str, target: SqlQueryBuilder, unit: str):
    """The median line with the min-max band of the repetitions (timeseries and trend panels)."""
    panel = (
        _panel(panel, title, description, target)
        .unit(unit)
        .line_width(1)
        .show_points(common.VisibilityMode.AUTO)
        .point_size(4)
        .tooltip(common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI).sort(common.SortOrder.NONE))
        .legend(common_builders.VizLegendOptions().show_legend(True).display_mode(common.LegendDisplayMode.LIST)
                .placement(common.LegendPlacement.BOTTOM))
    )
    return _band_overrides(panel)


def band_timeseries(title: str, description: str, query: str, unit: str = "short") -> timeseries.Panel:
    """x = the commit's plot time (Grafana's time axis, annotations)."""
    return _band(timeseries.Panel().span_nulls(True), title, description, sql(query).time_series(), unit)


def band_trend(title: str, description: str, query: str, unit: str = "short") -> trend.Panel:
    """x = the commit's position on the branch (equal spacing, true order)."""
    return _band(trend.Panel().x_field("position"), title, description, sql(query).table(), unit)


def sql_annotation(name: str, query: str) -> db.AnnotationQuery:
    """Annotations from SQL returning time, text and tags (comma-separated)."""
    return (
        db.AnnotationQuery()
        .name(name)
        .datasource(DATASOURCE)
        .enable(True)
        .icon_color("red")
        .target(sql(query, "Anno").table())
    )


def series_timeseries(title: str, description: str, query: str, unit: str = "short") -> timeseries.Panel:
    """Several series from one long-format query (a string column names each series)."""
    return (
        _panel(timeseries.Panel(), title, description, sql(query).time_series())
        .unit(unit)
        .show_points(common.VisibilityMode.AUTO)
        .point_size(4)
        .span_nulls(True)
        .tooltip(common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI).sort(common.SortOrder.DESCENDING))
        .legend(common_builders.VizLegendOptions().show_legend(True).display_mode(common.LegendDisplayMode.TABLE)
                .placement(common.LegendPlacement.RIGHT).calcs(["lastNotNull", "min", "max"]))
    )


def sparkline_stat(title: str, description: str, query: str, unit: str, time_series: bool = True) -> stat.Panel:
    """The last value of each series with its sparkline (or, from a table, one value per column)."""
    target = sql(query).time_series() if time_series else sql(query).table()
    return (
        _panel(stat.Panel(), title, description, target)
        .unit(unit)
        .graph_mode(common.BigValueGraphMode.AREA)
        .color_mode(common.BigValueColorMode.NONE)
        .text_mode(common.BigValueTextMode.VALUE_AND_NAME)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    )


def data_table(title: str, description: str, query: str) -> table.Panel:
    return (
        _panel(table.Panel(), title, description, sql(query).table())
        .show_header(True)
        .cell_height(common.TableCellHeight.SM)
    )


def link(title: str, url: str, target_blank: bool = False) -> db.DashboardLink:
    return db.DashboardLink(title).url(url).target_blank(target_blank)


def link_override(panel, field: str, title: str, url: str, target_blank: bool):
    """Make the cells of ``field`` a link (the URL may use ${__data.fields.<column>})."""
    value = [{"title": title, "url": url, "targetBlank": target_blank}]
    return panel.override_by_name(field, [DynamicConfigValue(id_val="links", value=value)])


def hide_columns(panel, *fields: str):
    for field in fields:
        panel = panel.override_by_name(field, [DynamicConfigValue(id_val="custom.hidden", value=True)])
    return panel


def commit_link(panel, field: str = "commit"):
    return link_override(panel, field, "Open the commit on the forge", "${__data.fields.commit_url}", True)


def trend_link(panel, field: str):
    """Cells that open the Metric trend dashboard on that row's series."""
    url = (f"/d/{TREND_UID}/metric-trend?var-branch=${{__data.fields.branch_id}}"
           "&var-machine=${__data.fields.machine_id}&var-config=${__data.fields.config_id}"
           "&var-metric=${__data.fields.metric}&var-backend=${__data.fields.backend}&${__url_time_range}")
    return link_override(panel, field, "Metric trend of this series", url, False)


def colour_by_text(panel, field: str, colours: dict[str, str]):
    """Colour a text column's cells by value (e.g. worse/better, untriaged/fixed)."""
    mapping = [{"type": "value", "options": {k: {"color": c, "index": i} for i, (k, c) in enumerate(colours.items())}}]
    return panel.override_by_name(field, [
        DynamicConfigValue(id_val="mappings", value=mapping),
        DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-text"}),
    ])


def datasource() -> DataSourceRef:
    return DATASOURCE
