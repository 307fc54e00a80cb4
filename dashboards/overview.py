"""Overview: per machine x config, the latest PPS, CPP, IPP and eIPC with their sparklines, the
change against the baseline, and the open alerts. "Latest" panels read the newest 50 commits of
the branch (view dash_recent_points), so their cost does not grow with the history."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from perfci_core import metrics as catalogue

from . import panels as p

UID = "perfci-overview"


def changes_query(metrics: tuple[str, ...], where: str = "") -> str:
    """Latest commit vs baseline per series; `moved` is the direction of the move, not a verdict."""
    return f"""
        SELECT c.machine, c.config, c.backend, c.metric, c.short_sha AS commit, c.position,
               c.latest, c.baseline, c.baseline_commits,
               100 * (c.latest - c.baseline) / nullif(c.baseline, 0) AS change_pct,
               CASE WHEN c.baseline IS NULL OR c.latest = c.baseline THEN 'same'
                    WHEN (c.latest > c.baseline) = (d.better = 'higher') THEN 'better'
                    ELSE 'worse' END AS moved,
               c.commit_url, c.branch_id, c.machine_id, c.config_id
        FROM dash_series_changes c
        JOIN {p.directions_values()} ON d.metric = c.metric
        WHERE c.branch_id = ${{branch:sqlstring}} AND c.metric IN ({p.quoted(metrics)}) {where}
        ORDER BY c.machine, c.config, c.backend, array_position(ARRAY[{p.quoted(metrics)}], c.metric::text)
    """


def changes_table(title: str, description: str, query: str):
    panel = p.data_table(title, description, query).decimals(3)
    panel = p.commit_link(panel)
    panel = p.trend_link(panel, "metric")
    panel = p.colour_by_text(panel, "moved", {"worse": "red", "better": "green", "same": "text"})
    panel = panel.override_by_name("change_pct", [p.DynamicConfigValue(id_val="unit", value="percent"),
                                                  p.DynamicConfigValue(id_val="decimals", value=2)])
    return p.hide_columns(panel, "commit_url", "branch_id", "machine_id", "config_id")


def open_alerts_table():
    query = """
        SELECT id AS alert, status, direction, machine, repository || ' ' || branch AS branch,
               coalesce(last_good_sha, 'start') || '..' || first_bad_sha AS range,
               metrics, summary, first_bad_url AS commit_url, created_at
        FROM dash_alert_groups
        WHERE status IN ('untriaged', 'acknowledged')
        ORDER BY created_at DESC, id DESC
        LIMIT 100
    """
    panel = p.data_table("Open alerts", "Alert groups not yet triaged as fixed or invalid, newest first", query)
    panel = p.commit_link(panel, "range")
    panel = p.colour_by_text(panel, "direction", {"regression": "red", "improvement": "green"})
    return p.hide_columns(panel, "commit_url")


def build() -> db.Dashboard:
    board = p.dashboard(UID, "perfci / Overview",
                        "Latest lean-model metrics per machine x config, their change against the baseline, open alerts")
    board = board.with_variable(p.branch_variable())
    for metric in p.LEAN_HEADLINE:
        definition = catalogue.get(metric)
        query = f"""
            SELECT p.plot_time AS time, p.median AS value,
                   m.name || ' / ' || cfg.name || ' (' || p.backend || ')' AS series
            FROM dash_recent_points p
            JOIN dash_machines m ON m.machine_id = p.machine_id
            JOIN dash_configs cfg ON cfg.config_id = p.config_id
            WHERE p.branch_id = ${{branch:sqlstring}} AND p.metric = '{metric}' AND $__timeFilter(p.plot_time)
            ORDER BY 1
        """
        panel = p.sparkline_stat(f"{metric.upper() if metric != 'eipc' else 'eIPC'} (latest)",
                                 f"{definition.description} ({definition.direction.value} is better): "
                                 "median of the repetitions at the latest commit, sparkline over the branch's newest 50 commits",
                                 query, p.grafana_unit(metric))
        board = board.with_panel(panel.display_name("${__field.labels.series}").height(7).span(6))
    board = board.with_panel(
        changes_table("Change against the baseline",
                      "Latest commit of each series against the median of its ten previous measured commits. "
                      "'moved' is the direction of the move, not a verdict: alerts are the verdict.",
                      changes_query(p.LEAN_HEADLINE)).height(12).span(24))
    return board.with_panel(open_alerts_table().height(9).span(24))
