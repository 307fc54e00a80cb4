"""The committed dashboards are what the factories generate, in a stable form Grafana can load."""

from __future__ import annotations

import json

from grafana_foundation_sdk.models.dashboard import Dashboard

from dashboards import JSON_DIR
from dashboards.generate import FACTORIES, generated, render, stale
from dashboards.sql_query import DATASOURCE_TYPE, DATASOURCE_UID, SqlQuery


def test_committed_json_is_what_the_code_generates():
    assert stale() == [], "run `python -m dashboards` and commit dashboards/json/"


def test_stale_notices_a_hand_edit(tmp_path):
    for name, text in generated().items():
        (tmp_path / name).write_text(text)
    assert stale(tmp_path) == []
    edited = json.loads((tmp_path / "overview.json").read_text())
    edited["title"] = "edited in the UI"
    (tmp_path / "overview.json").write_text(json.dumps(edited))
    (tmp_path / "leftover.json").write_text("{}")
    assert stale(tmp_path) == ["overview.json", "leftover.json"]


def test_output_is_stable_and_sorted():
    first, second = generated(), generated()
    assert first == second
    for name, text in first.items():
        assert text.endswith("}\n")
        assert text == json.dumps(json.loads(text), sort_keys=True, indent=2, ensure_ascii=False) + "\n", name


def test_every_query_targets_the_provisioned_datasource_and_panels_have_ids():
    uids = set()
    for name in FACTORIES:
        board = json.loads((JSON_DIR / name).read_text())
        uids.add(board["uid"])
        ids = [panel["id"] for panel in board["panels"]]
        assert ids == list(range(1, len(ids) + 1)), name
        targets = [t for p in board["panels"] for t in p["targets"]]
        targets += [a["target"] for a in board["annotations"].get("list", [])]
        targets += [v for v in board["templating"]["list"] if v["type"] == "query"]
        for target in targets:
            assert target["datasource"] == {"type": DATASOURCE_TYPE, "uid": DATASOURCE_UID}, (name, target)
    assert uids == {"perfci-overview", "perfci-trend", "perfci-lean", "perfci-alerts"}


def test_sdk_reads_the_custom_query_type_back():
    board = Dashboard.from_json(json.loads(render(FACTORIES["metric-trend.json"]())))
    queries = [t for p in board.panels for t in p.targets]
    assert queries and all(isinstance(q, SqlQuery) for q in queries)
    assert "dash_series_points" in queries[0].raw_sql and queries[0].format_val == "time_series"
