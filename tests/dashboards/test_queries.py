"""Every panel, annotation and variable query of every dashboard, expanded the way Grafana expands
it (dashboards/macros.py), runs on the seeded PostgreSQL and returns the columns its panel uses,
with values that agree with the data that was seeded."""

from __future__ import annotations

import json
import math
import re
import statistics
from datetime import datetime, timedelta
from decimal import Decimal

import pytest

from dashboards import JSON_DIR
from dashboards.macros import TimeRange, expand, panel_queries, resolve_variables
from dashboards.sample_data import STEPS

pytestmark = pytest.mark.services

BAND = ["time", "min", "median", "max"]
CHANGES = ["machine", "config", "backend", "metric", "commit", "position", "latest", "baseline", "baseline_commits",
           "change_pct", "moved", "commit_url", "branch_id", "machine_id", "config_id"]
EXPECTED_COLUMNS = {
    ("perfci-overview", "PPS (latest)"): ["time", "value", "series"],
    ("perfci-overview", "CPP (latest)"): ["time", "value", "series"],
    ("perfci-overview", "IPP (latest)"): ["time", "value", "series"],
    ("perfci-overview", "eIPC (latest)"): ["time", "value", "series"],
    ("perfci-overview", "Change against the baseline"): CHANGES,
    ("perfci-overview", "Open alerts"): ["alert", "status", "direction", "machine", "branch", "range", "metrics", "summary",
                                         "commit_url", "created_at"],
    ("perfci-trend", "$metric ($backend) over commit time"): BAND,
    ("perfci-trend", "$metric ($backend) by commit position"): ["position", "min", "median", "max"],
    ("perfci-trend", "Commits"): ["position", "commit", "subject", "author", "committed_at", "reps", "min", "median", "max",
                                  "change_pct", "commit_url"],
    ("perfci-trend", "Alerts on this series"): ["alert", "status", "direction", "position", "commit", "before_median",
                                                "after_median", "change_pct"],
    ("perfci-trend", "annotation: Alerts on this metric"): ["time", "text", "tags"],
    ("perfci-lean", "PPS (higher is better)"): BAND,
    ("perfci-lean", "CUR (higher is better)"): BAND,
    ("perfci-lean", "eIPC (higher is better)"): BAND,
    ("perfci-lean", "IPP (lower is better)"): BAND,
    ("perfci-lean", "Per-packet counters (median of the repetitions)"): ["time", "value", "metric"],
    ("perfci-lean", "Memory hazards per packet (median of the repetitions)"): ["time", "value", "metric"],
    ("perfci-lean", "Serial fraction B (lower is better)"): BAND,
    ("perfci-lean", "PPS at 1 lcore and at N lcores"): ["time", "value", "metric"],
    ("perfci-lean", "Scaling efficiency E(N) (higher is better)"): BAND,
    ("perfci-lean", "Return on investment: T\u00b2/\u03a3CPU and T\u00b2/P (higher is better)"): ["time", "value", "metric"],
    ("perfci-lean", "Package energy (RAPL)"): ["time", "value", "metric"],
    ("perfci-lean", "Latest commit against the baseline, every metric"): CHANGES,
    ("perfci-lean", "annotation: Alert groups on this machine"): ["time", "text", "tags"],
    ("perfci-alerts", "Alert groups by status"): ["untriaged", "acknowledged", "invalid", "fixed"],
    ("perfci-alerts", "Alert groups per week"): ["time", "regressions", "improvements"],
    ("perfci-alerts", "Alert groups"): ["alert", "status", "direction", "branch", "machine", "range", "last_good_position",
                                        "first_bad_position", "subject", "author", "alert_count", "metrics", "summary",
                                        "explanation", "triage_note", "triaged_by", "created_at", "commit_url"],
    ("perfci-alerts", "Pending: suspected changes being confirmed"): [
        "suspect", "state", "why", "direction", "branch", "machine", "config", "metric", "change_pct", "p_value", "commit",
        "position", "subject", "confirm_jobs", "reason", "updated_at", "commit_url"],
    ("perfci-alerts", "Creeps: slow moves over many commits"): [
        "creep", "direction", "branch", "machine", "config", "metric", "change_pct", "p_value", "range", "first_position",
        "last_position", "commits", "first_seen", "updated_at", "commit_url"],
}

NOT_SCALING = {"Serial fraction B (lower is better)", "Scaling efficiency E(N) (higher is better)", "Package energy (RAPL)"}
# (dashboard file, variable choice by name, panels allowed to be empty for that choice)
SELECTIONS = {
    "overview": ("overview.json", {}, set()),
    "trend-pmu-eipc": ("metric-trend.json", {"machine": "dut-01", "config": "self-64B", "metric": "eipc", "backend": "pmu"}, set()),
    "trend-sim-ipp": ("metric-trend.json", {"machine": "ci-vm-01", "config": "pcap-64B", "metric": "ipp", "backend": "sim"}, set()),
    "trend-defaults": ("metric-trend.json", {"machine": "dut-02"}, set()),
    # self-1518B is not measured as a scaling config: no B, no E(N), no energy
    "lean-pmu": ("lean-decomposition.json", {"machine": "dut-02", "config": "self-1518B", "backend": "pmu"}, NOT_SCALING),
    "lean-scaling": ("lean-decomposition.json", {"machine": "dut-01", "config": "self-64B", "backend": "pmu"}, set()),
    # sim measures IPP and cache misses only: its PPS, CUR and eIPC panels are empty by design.
    "lean-sim": ("lean-decomposition.json", {"machine": "ci-vm-01"},
                 {"PPS (higher is better)", "CUR (higher is better)", "eIPC (higher is better)", "PPS at 1 lcore and at N lcores",
                  "Return on investment: T\u00b2/\u03a3CPU and T\u00b2/P (higher is better)"} | NOT_SCALING),
    "alerts-open": ("alerts.json", {}, set()),
    "alerts-all": ("alerts.json", {"status": "$__all", "machine": ["dut-01", "ci-vm-01"]}, set()),
}


def _board(name: str) -> dict:
    return json.loads((JSON_DIR / name).read_text())


def _choice(seeded, chosen: dict) -> dict:
    """Names -> the option values the variables use (ids for machine and config)."""
    ids = {"machine": seeded.machines, "config": seeded.configs}
    out = {}
    for name, value in chosen.items():
        if name in ids and value != "$__all":
            out[name] = [str(ids[name][v]) for v in value] if isinstance(value, list) else str(ids[name][value])
        else:
            out[name] = value
    return out


def _referenced_fields(panel_json: dict) -> set[str]:
    """Column names the panel's config relies on: overrides by name, links, x field, band fill."""
    text = json.dumps(panel_json)
    names = set(re.findall(r"__data\.fields\.(\w+)", text))
    for override in panel_json.get("fieldConfig", {}).get("overrides", []):
        if override["matcher"]["id"] == "byName":
            names.add(override["matcher"]["options"])
        for prop in override["properties"]:
            if prop["id"] == "custom.fillBelowTo":
                names.add(prop["value"])
    if panel_json.get("options", {}).get("xField"):
        names.add(panel_json["options"]["xField"])
    return names


def _run_dashboard(run_sql, seeded_db, file: str, chosen: dict):
    _, seeded, now = seeded_db
    board = _board(file)
    time_range = TimeRange.from_dashboard(board, now)
    variables = resolve_variables(board, run_sql, time_range, _choice(seeded, chosen))
    return {q.panel: (q, run_sql(expand(q.sql, variables, time_range))) for q in panel_queries(board)}


def _is_number(value) -> bool:
    return isinstance(value, (int, float, Decimal)) and not isinstance(value, bool) and math.isfinite(float(value))


@pytest.mark.parametrize("selection", SELECTIONS)
def test_every_query_runs_and_returns_its_panel_columns(run_sql, seeded_db, selection):
    file, chosen, may_be_empty = SELECTIONS[selection]
    results = _run_dashboard(run_sql, seeded_db, file, chosen)
    board_uid = _board(file)["uid"]
    assert {key for key in EXPECTED_COLUMNS if key[0] == board_uid} == {(board_uid, panel) for panel in results}
    for panel, (query, rows) in results.items():
        if panel in may_be_empty:
            assert rows == [], f"{panel}: the backend cannot measure this, yet rows came back"
            continue
        assert rows, f"{selection}: {panel} returned no rows"
        columns = list(rows[0].keys())
        assert columns == EXPECTED_COLUMNS[(board_uid, panel)], panel
        assert _referenced_fields(query.panel_json) <= set(columns) | {"max of repetitions"}, panel
        if query.format == "time_series":
            assert columns[0] == "time"
            times = [r["time"] for r in rows]
            assert all(isinstance(t, (datetime, Decimal)) for t in times)
            assert times == sorted(times), f"{panel}: Grafana needs ascending time"
            for row in rows:
                assert all(_is_number(row[c]) for c in columns[1:] if c not in ("series", "metric")), (panel, row)


def test_band_is_ordered_and_sim_has_no_spread(run_sql, seeded_db):
    for selection, spread in (("trend-pmu-eipc", True), ("trend-sim-ipp", False)):
        file, chosen, _ = SELECTIONS[selection]
        rows = _run_dashboard(run_sql, seeded_db, file, chosen)["$metric ($backend) by commit position"][1]
        assert len(rows) == 500 and [r["position"] for r in rows] == list(range(500))
        assert all(r["min"] <= r["median"] <= r["max"] for r in rows)
        assert any(r["min"] < r["max"] for r in rows) is spread


def test_plot_time_keeps_branch_order_and_commit_time(run_sql, seeded_db):
    _, seeded, _ = seeded_db
    rows = run_sql(f"SELECT position, committed_at, plot_time FROM dash_branch_commits WHERE branch_id = {seeded.branch_id} ORDER BY position")
    assert all(b["plot_time"] > a["plot_time"] for a, b in zip(rows, rows[1:]))
    assert any(b["committed_at"] < a["committed_at"] for a, b in zip(rows, rows[1:])), "the sample data has rebased commits"
    latest = None
    for row in rows:  # the running max of commit time along the branch, plus position milliseconds
        latest = row["committed_at"] if latest is None else max(latest, row["committed_at"])
        assert row["plot_time"] == latest + timedelta(milliseconds=row["position"])


def test_commits_table_links_to_the_forge_and_shows_the_step(run_sql, seeded_db):
    _, seeded, _ = seeded_db
    file, chosen, _ = SELECTIONS["trend-pmu-eipc"]
    rows = _run_dashboard(run_sql, seeded_db, file, chosen)["Commits"][1]
    by_position = {r["position"]: r for r in rows}
    for row in rows[:20]:
        sha = seeded.shas[row["position"]]
        assert row["commit"] == sha[:12]
        assert row["commit_url"] == f"https://github.com/acme/dataplane/commit/{sha}"
    step = STEPS[1]  # eIPC -5 % with the store-forward blocks
    at = seeded.position_of_step(step)
    assert by_position[at]["subject"] == step.subject
    assert by_position[at]["change_pct"] == pytest.approx(-5.0, abs=2.0)
    quiet = [abs(r["change_pct"]) for r in rows if r["change_pct"] is not None and r["position"] != at]
    assert statistics.median(quiet) < 1.5  # noise between neighbours is far below the step


def test_baseline_change_matches_an_independent_computation(run_sql, seeded_db):
    _, seeded, _ = seeded_db
    results = _run_dashboard(run_sql, seeded_db, "metric-trend.json",
                             {"machine": "dut-01", "config": "self-64B", "metric": "cpp", "backend": "pmu"})
    medians = [r["median"] for r in sorted(results["Commits"][1], key=lambda r: r["position"])]
    overview = _run_dashboard(run_sql, seeded_db, "overview.json", {})["Change against the baseline"][1]
    [row] = [r for r in overview if (r["machine"], r["config"], r["metric"], r["backend"]) == ("dut-01", "self-64B", "cpp", "pmu")]
    assert row["latest"] == pytest.approx(medians[-1])
    assert row["baseline"] == pytest.approx(statistics.median(medians[-11:-1]))
    assert row["baseline_commits"] == 10
    assert row["change_pct"] == pytest.approx(100 * (medians[-1] / statistics.median(medians[-11:-1]) - 1))
    assert row["moved"] == ("worse" if row["latest"] > row["baseline"] else "better")  # cpp: lower is better
    assert {r["metric"] for r in overview} == {"pps", "cpp", "ipp", "eipc"}
    assert len(overview) == 2 * 3 * 4 + 3  # pmu machines x configs x metrics + the sim machine's ipp


def test_overview_stats_have_one_plausible_series_per_machine_config(run_sql, seeded_db):
    results = _run_dashboard(run_sql, seeded_db, "overview.json", {})
    expected = {"PPS (latest)": (6, 1e7, 2e8), "CPP (latest)": (6, 20.0, 60.0), "IPP (latest)": (9, 70.0, 120.0),
                "eIPC (latest)": (6, 1.5, 4.0)}
    for panel, (series_count, low, high) in expected.items():
        rows = results[panel][1]
        assert len({r["series"] for r in rows}) == series_count, panel
        assert all(low < r["value"] < high for r in rows), panel


def test_alert_annotations_sit_on_the_first_bad_commit(run_sql, seeded_db):
    _, seeded, _ = seeded_db
    results = _run_dashboard(run_sql, seeded_db, "metric-trend.json",
                             {"machine": "ci-vm-01", "config": "pcap-64B", "metric": "ipp", "backend": "sim"})
    annotations = results["annotation: Alerts on this metric"][1]
    band = {r["time"]: r for r in results["$metric ($backend) over commit time"][1]}
    ipp_steps = [s for s in STEPS if s.ipp != 1.0]
    assert len(annotations) == len(ipp_steps)
    for note in annotations:
        assert note["time"] in band, "annotation time is a point of the band"
    texts = " ".join(n["text"] for n in annotations)
    for step in ipp_steps:
        assert seeded.shas[seeded.position_of_step(step)][:12] in texts
    assert sorted(n["tags"] for n in annotations) == ["improvement,acknowledged", "regression,fixed"]
    table = results["Alerts on this series"][1]
    assert [r["position"] for r in table] == sorted((seeded.position_of_step(s) for s in ipp_steps), reverse=True)
    assert table[0]["change_pct"] == pytest.approx(-2.0, abs=0.3) and table[1]["change_pct"] == pytest.approx(3.0, abs=0.3)


def test_alerts_dashboard_counts_what_was_seeded(run_sql, seeded_db):
    _, seeded, _ = seeded_db
    statuses = [STEPS[step].status for (step, _machine) in seeded.alert_groups]
    results = _run_dashboard(run_sql, seeded_db, "alerts.json", {})
    [counts] = results["Alert groups by status"][1]
    assert counts == {s: statuses.count(s) for s in ("untriaged", "acknowledged", "invalid", "fixed")}
    open_count = statuses.count("untriaged") + statuses.count("acknowledged")
    groups = results["Alert groups"][1]
    assert len(groups) == open_count
    assert all(re.fullmatch(r"[0-9a-f]{12}\.\.[0-9a-f]{12}", g["range"]) for g in groups)
    assert all(g["first_bad_position"] == g["last_good_position"] + 1 for g in groups)
    assert all(g["alert_count"] > 0 and g["metrics"] for g in groups)
    weekly = results["Alert groups per week"][1]
    assert sum(r["regressions"] + r["improvements"] for r in weekly) == open_count
    every = _run_dashboard(run_sql, seeded_db, "alerts.json", {"status": "$__all", "machine": ["dut-01", "ci-vm-01"]})
    assert {g["machine"] for g in every["Alert groups"][1]} == {"dut-01", "ci-vm-01"}


def test_serial_fraction_band_is_the_bootstrap_interval(run_sql, seeded_db):
    file, chosen, _ = SELECTIONS["lean-scaling"]
    results = _run_dashboard(run_sql, seeded_db, file, chosen)
    rows = results["Serial fraction B (lower is better)"][1]
    assert rows and all(r["min"] == pytest.approx(0.035) and r["max"] == pytest.approx(0.065) for r in rows)
    assert statistics.median(r["median"] for r in rows) == pytest.approx(0.05, abs=0.01)
    pps = results["PPS at 1 lcore and at N lcores"][1]
    assert {r["metric"] for r in pps} == {"pps", "pps_max_lcores"}
