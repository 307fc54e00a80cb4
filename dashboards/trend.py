"""Metric trend: one metric of one machine x config along a branch, median with the min-max band of
its repetitions, alerts as annotations, commits linked to the forge.

Commit order: Grafana's time axis needs a time column, so the band is drawn at each commit's
`plot_time` (its commit time, forced to increase along the branch: see migration 0004), and the
same band is drawn again with x = the commit's position on the branch (a trend panel: equal
spacing, exact order). The table lists the commits with their sha, subject and link."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from . import panels as p

UID = p.TREND_UID

# Every variable through Grafana's ${var:sqlstring} (each value quoted, ' doubled): a value typed
# into the URL stays one SQL literal; the ids compare as bigint, so a non-number is an error that
# names only the value itself.
SERIES = ("branch_id = ${branch:sqlstring} AND machine_id = ${machine:sqlstring} AND config_id = ${config:sqlstring} "
          "AND metric = ${metric:sqlstring} AND backend = ${backend:sqlstring}")


def alert_annotation() -> db.AnnotationQuery:
    query = f"""
        SELECT plot_time AS time,
               'alert ' || group_id || ' (' || status || '): ' || metric || ' '
               || CASE WHEN change_pct >= 0 THEN '+' ELSE '' END || round(change_pct::numeric, 2) || '% at '
               || first_bad_sha || '. ' || summary AS text,
               direction || ',' || status AS tags
        FROM dash_alert_marks
        WHERE {SERIES} AND $__timeFilter(plot_time)
    """
    return p.sql_annotation("Alerts on this metric", query)


def build() -> db.Dashboard:
    board = p.dashboard(UID, "perfci / Metric trend",
                        "One metric over the commits of a branch: median and min-max of the repetitions, alerts, commits")
    for variable in (p.branch_variable(), p.machine_variable(), p.config_variable(), p.metric_variable(),
                     p.backend_variable()):
        board = board.with_variable(variable)
    board = board.annotation(alert_annotation())
    board = board.link(p.link("Lean decomposition", "/d/perfci-lean/lean-decomposition?${__all_variables}&${__url_time_range}"))
    band = f"""
        SELECT plot_time AS time, min, median, max
        FROM dash_series_points
        WHERE {SERIES} AND $__timeFilter(plot_time)
        ORDER BY position
    """
    board = board.with_panel(p.band_timeseries(
        "$metric ($backend) over commit time",
        "Median of the repetitions at each commit with their min-max band. x = commit time, kept in branch "
        "order (a commit dated before its predecessor is drawn just after it). Red marks: alerts.",
        band).height(10).span(24))
    by_position = f"""
        SELECT position, min, median, max
        FROM dash_series_points
        WHERE {SERIES} AND $__timeFilter(plot_time)
        ORDER BY position
    """
    board = board.with_panel(p.band_trend(
        "$metric ($backend) by commit position",
        "The same band with x = position on the branch: every commit one step, exactly in branch order.",
        by_position).height(9).span(24))
    commits = f"""
        SELECT position, short_sha AS commit, subject, author, committed_at, reps, min, median, max,
               100 * (median / nullif(lag(median) OVER (ORDER BY position), 0) - 1) AS change_pct,
               commit_url
        FROM dash_series_points
        WHERE {SERIES} AND $__timeFilter(plot_time)
        ORDER BY position DESC
        LIMIT 500
    """
    table = p.data_table("Commits", "Newest first; change_pct is against the previous measured commit (noise "
                         "included: the alerts are the verdict). Click a sha to open it on the forge.", commits)
    table = p.hide_columns(p.commit_link(table.decimals(4)), "commit_url")
    table = table.override_by_name("change_pct", [p.DynamicConfigValue(id_val="unit", value="percent"),
                                                  p.DynamicConfigValue(id_val="decimals", value=2)])
    board = board.with_panel(table.height(10).span(16))
    alerts = f"""
        SELECT group_id AS alert, status, direction, first_bad_position AS position, first_bad_sha AS commit,
               before_median, after_median, change_pct
        FROM dash_alert_marks
        WHERE {SERIES}
        ORDER BY first_bad_position DESC
    """
    alerts_table = p.data_table("Alerts on this series", "Every alert on this metric, any status", alerts).decimals(3)
    alerts_table = p.colour_by_text(alerts_table, "direction", {"regression": "red", "improvement": "green"})
    return board.with_panel(alerts_table.height(10).span(8))
