"""Alerts: the alert groups with their status, suspected commit range, the metrics that moved and
the lean-model explanation; the suspected changes still being confirmed (pending, not alerts); and
the creeps (slow moves over many commits, not alerts)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.models.dashboard import VariableOption

from . import panels as p

UID = "perfci-alerts"
STATUSES = ("untriaged", "acknowledged", "invalid", "fixed")
FILTER = "status IN (${status:sqlstring}) AND machine_id IN (${machine:sqlstring})"


def status_variable() -> db.CustomVariable:
    return (
        db.CustomVariable("status")
        .label("Status")
        .description("Triage status")
        .values(",".join(STATUSES))
        .multi(True)
        .include_all(True)
        .current(VariableOption(selected=True, text=["untriaged", "acknowledged"], value=["untriaged", "acknowledged"]))
    )


def build() -> db.Dashboard:
    board = p.dashboard(UID, "perfci / Alerts", "Alert groups: status, suspected commit range, what moved and why",
                        time_from="now-1y")
    board = board.with_variable(status_variable()).with_variable(p.machine_variable(multi=True))
    counts = f"""
        SELECT {", ".join(f"count(*) FILTER (WHERE status = '{s}') AS {s}" for s in STATUSES)}
        FROM dash_alert_groups
        WHERE machine_id IN (${{machine:sqlstring}})
    """
    board = board.with_panel(p.sparkline_stat("Alert groups by status", "All time, on the selected machines",
                                              counts, "none", time_series=False).height(5).span(10))
    per_week = f"""
        SELECT $__timeGroupAlias(created_at, '7d'),
               count(*) FILTER (WHERE direction = 'regression') AS regressions,
               count(*) FILTER (WHERE direction = 'improvement') AS improvements
        FROM dash_alert_groups
        WHERE $__timeFilter(created_at) AND {FILTER}
        GROUP BY 1
        ORDER BY 1
    """
    weekly = p.series_timeseries("Alert groups per week", "New alert groups per week by direction", per_week)
    weekly = weekly.draw_style(p.common.GraphDrawStyle.BARS).fill_opacity(60).stacking(
        p.common_builders.StackingConfig().mode(p.common.StackingMode.NORMAL))
    board = board.with_panel(weekly.height(5).span(14))
    groups = f"""
        SELECT id AS alert, status, direction, repository || ' ' || branch AS branch, machine,
               coalesce(last_good_sha, 'start') || '..' || first_bad_sha AS range,
               last_good_position, first_bad_position, first_bad_subject AS subject, first_bad_author AS author,
               alert_count, metrics, summary, explanation, triage_note, triaged_by, created_at,
               first_bad_url AS commit_url
        FROM dash_alert_groups
        WHERE {FILTER} AND $__timeFilter(created_at)
        ORDER BY created_at DESC, id DESC
        LIMIT 500
    """
    table = p.data_table("Alert groups", "One group per suspected commit range and machine; metrics sorted by the "
                         "size of their change. The range links to the first bad commit.", groups)
    table = p.commit_link(table, "range")
    table = p.colour_by_text(table, "status", {"untriaged": "orange", "acknowledged": "yellow",
                                               "invalid": "text", "fixed": "green"})
    table = p.colour_by_text(table, "direction", {"regression": "red", "improvement": "green"})
    table = table.override_by_name("explanation", [p.DynamicConfigValue(id_val="custom.cellOptions",
                                                                        value={"type": "json-view"})])
    board = board.with_panel(p.hide_columns(table, "commit_url").height(16).span(24))
    return board.with_panel(pending_table().height(8).span(24)).with_panel(creeps_table().height(8).span(24))


def pending_table():
    """Suspects: pending while their confirmation rounds run; exhausted when the budget stopped them."""
    suspects = """
        SELECT id AS suspect, state, why, direction, branch, machine, config, metric || '/' || backend AS metric,
               round(change_pct::numeric, 2) AS change_pct, p_value, suspect_sha AS commit, suspect_position AS position,
               suspect_subject AS subject, confirm_jobs_active AS confirm_jobs, reason, updated_at,
               suspect_url AS commit_url
        FROM dash_suspects
        WHERE state IN ('pending', 'exhausted') AND machine_id IN (${machine:sqlstring})
        ORDER BY state, updated_at DESC, id DESC
        LIMIT 200
    """
    table = p.data_table("Pending: suspected changes being confirmed",
                         "Likely changes the statistics cannot decide yet; extra repetitions of their commits run "
                         "ahead of push jobs, then detection decides again. Not alerts. exhausted: the series' "
                         "re-measurement budget or the rounds per commit are spent, undecided.", suspects)
    table = p.commit_link(table, "commit")
    table = p.colour_by_text(table, "state", {"pending": "blue", "exhausted": "text"})
    table = p.colour_by_text(table, "direction", {"regression": "red", "improvement": "green", "change": "text"})
    return p.hide_columns(table, "commit_url")


def creeps_table():
    """Creeps: a level that moved gradually over a range of commits, no single commit to blame."""
    creeps = """
        SELECT id AS creep, direction, branch, machine, config, metric || '/' || backend AS metric,
               round(change_pct::numeric, 2) AS change_pct, p_value, first_sha || '..' || last_sha AS range,
               first_position, last_position, last_position - first_position + 1 AS commits, created_at AS first_seen,
               updated_at, last_url AS commit_url
        FROM dash_creeps
        WHERE machine_id IN (${machine:sqlstring})
        ORDER BY updated_at DESC, id DESC
        LIMIT 200
    """
    table = p.data_table("Creeps: slow moves over many commits",
                         "A level that moved gradually over a range of commits (a host aging, a cache filling, many "
                         "small commits), with no single commit to blame. Not alerts: no commit's status fails for "
                         "them; a step on top of a creep is alerted as a step. The range links to its last commit.", creeps)
    table = p.commit_link(table, "range")
    table = p.colour_by_text(table, "direction", {"regression": "red", "improvement": "green", "change": "text"})
    return p.hide_columns(table, "commit_url")
