"""Lean decomposition: PPS, CUR, eIPC and IPP side by side (PPS = Freq x CUR x eIPC / IPP) and the
per-packet counters, so a regression's "why" is one glance: more instructions (IPP), fewer
instructions per cycle (eIPC, with the counters that stall it), or less time busy (CUR)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from perfci_core import metrics as catalogue

from . import panels as p
from .overview import changes_query, changes_table

UID = "perfci-lean"

SERIES = ("branch_id = ${branch:sqlstring} AND machine_id = ${machine:sqlstring} AND config_id = ${config:sqlstring} "
          "AND backend = ${backend:sqlstring}")
_TITLES = {"pps": "PPS", "cur": "CUR", "eipc": "eIPC", "ipp": "IPP"}


def alert_annotation() -> db.AnnotationQuery:
    query = """
        SELECT first_bad_time AS time, 'alert ' || id || ' (' || status || '): ' || summary AS text,
               direction || ',' || status AS tags
        FROM dash_alert_groups
        WHERE branch_id = ${branch:sqlstring} AND machine_id = ${machine:sqlstring} AND $__timeFilter(first_bad_time)
    """
    return p.sql_annotation("Alert groups on this machine", query)


def build() -> db.Dashboard:
    board = p.dashboard(UID, "perfci / Lean decomposition",
                        "PPS = Freq x CUR x eIPC / IPP: which factor moved, and the per-packet counters behind it")
    for variable in (p.branch_variable(), p.machine_variable(), p.config_variable(), p.backend_variable()):
        board = board.with_variable(variable)
    board = board.annotation(alert_annotation())
    for metric in p.LEAN_FACTORS:
        definition = catalogue.get(metric)
        query = f"""
            SELECT plot_time AS time, min, median, max
            FROM dash_series_points
            WHERE {SERIES} AND metric = '{metric}' AND $__timeFilter(plot_time)
            ORDER BY position
        """
        board = board.with_panel(p.band_timeseries(
            f"{_TITLES[metric]} ({definition.direction.value} is better)",
            f"{definition.description}; backends: {', '.join(sorted(b.value for b in definition.backends))} "
            "(no data when the selected backend cannot measure it)",
            query, p.grafana_unit(metric)).height(8).span(6))
    def per_packet(metrics: tuple[str, ...]) -> str:
        return f"""
        SELECT plot_time AS time, median AS value, metric
        FROM dash_series_points
        WHERE {SERIES} AND metric IN ({p.quoted(metrics)}) AND $__timeFilter(plot_time)
        ORDER BY 1
    """

    board = board.with_panel(p.series_timeseries(
        "Per-packet counters (median of the repetitions)",
        "Cache, L1D and LLC misses, branch misses, per packet (sim: simulated cache misses)",
        per_packet(p.PER_PACKET_COUNTERS), "short").display_name("${__field.labels.metric}").height(9).span(12))
    board = board.with_panel(p.series_timeseries(
        "Memory hazards per packet (median of the repetitions)",
        "Stalls that cost cycles, not instructions: loads blocked by store forwarding (pmu and sim), "
        "cache-line-split loads and stores and 4K-aliasing loads (sim: memhazard's store-buffer model; "
        "the alert explanations name the function and line)",
        per_packet(p.MEMORY_HAZARDS), "short").display_name("${__field.labels.metric}").height(9).span(12))
    for panel in scaling_panels(per_packet):
        board = board.with_panel(panel)
    lean_metrics = tuple(catalogue.CATALOGUE)
    return board.with_panel(changes_table(
        "Latest commit against the baseline, every metric",
        "Median of the latest commit against the median of the ten previous measured commits. "
        "'moved' is the direction of the move, not a verdict.",
        changes_query(lean_metrics, "AND c.machine_id = ${machine:sqlstring} AND c.config_id = ${config:sqlstring} "
                      "AND c.backend = ${backend:sqlstring}"),
    ).height(12).span(24))


def scaling_panels(series_query) -> list:
    """Scaling (a scaling config: 1..N lcores) and return on investment; energy where RAPL is read."""
    interval = f"""
        SELECT max(plot_time) AS time,
               max(median) FILTER (WHERE metric = 'serial_fraction_low') AS min,
               max(median) FILTER (WHERE metric = 'serial_fraction') AS median,
               max(median) FILTER (WHERE metric = 'serial_fraction_high') AS max
        FROM dash_series_points
        WHERE {SERIES} AND metric IN ('serial_fraction', 'serial_fraction_low', 'serial_fraction_high')
          AND $__timeFilter(plot_time)
        GROUP BY position
        HAVING max(median) FILTER (WHERE metric = 'serial_fraction') IS NOT NULL
        ORDER BY 1
    """
    efficiency = f"""
        SELECT plot_time AS time, min, median, max
        FROM dash_series_points
        WHERE {SERIES} AND metric = 'scaling_efficiency' AND $__timeFilter(plot_time)
        ORDER BY position
    """
    return [
        p.band_timeseries(
            "Serial fraction B (lower is better)",
            "Amdahl's serial fraction fitted to PPS at 1..N lcores (scaling configs). Median of the repetitions, "
            "band: the 95 % bootstrap interval over the repetitions. A shared cache line or a lock per packet "
            "raises B while one lcore does not move.",
            interval, p.grafana_unit("serial_fraction")).height(8).span(8),
        p.series_timeseries(
            "PPS at 1 lcore and at N lcores",
            "pps: the 1-lcore run; pps_max_lcores: the run at the most lcores the scaling config used (median of the repetitions)",
            series_query(("pps", "pps_max_lcores")), "pps").display_name("${__field.labels.metric}").height(8).span(8),
        p.band_timeseries(
            "Scaling efficiency E(N) (higher is better)",
            "PPS(N) / (N x PPS(1)) at the most lcores N; 1 is perfect scaling",
            efficiency, p.grafana_unit("scaling_efficiency")).height(8).span(8),
        p.series_timeseries(
            "Return on investment: T\u00b2/\u03a3CPU and T\u00b2/P (higher is better)",
            "roi_cpu: Mpps\u00b2 per busy CPU of the forwarding lcores; roi_power: Mpps\u00b2 per package watt (RAPL, "
            "only where it is readable)",
            series_query(("roi_cpu", "roi_power")), "short").display_name("${__field.labels.metric}").height(8).span(12),
        p.series_timeseries(
            "Package energy (RAPL)",
            "power_w: average package watts over the window; energy_per_packet: nJ per packet; other_cpus_busy: "
            "busy CPUs outside the forwarding lcores meanwhile (RAPL counts the whole package). No data where RAPL "
            "is not readable (VMs): the result says why instead.",
            series_query(("power_w", "energy_per_packet", "other_cpus_busy")), "short")
        .display_name("${__field.labels.metric}").height(8).span(12),
    ]
