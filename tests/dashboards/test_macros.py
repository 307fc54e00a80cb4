"""The macro expander used to run panel SQL the way Grafana would."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dashboards.macros import ExpansionError, TimeRange, Value, expand, relative_time, resolve_variables

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
RANGE = TimeRange(relative_time("now-7d", NOW), NOW)


def test_variables_single_raw_multi_quoted():
    variables = {"machine": Value(("3",), False), "status": Value(("untriaged", "it's"), True)}
    sql = expand("machine_id = $machine AND status IN (${status})", variables, RANGE)
    assert sql == "machine_id = 3 AND status IN ('untriaged','it''s')"


def test_time_macros():
    sql = expand("$__timeFilter(t) AND $__timeFrom() < $__timeTo() GROUP BY $__timeGroupAlias(t, '7d')", {}, RANGE)
    assert sql == ("t BETWEEN '2026-11-14T12:00:00Z' AND '2026-11-21T12:00:00Z' AND '2026-11-14T12:00:00Z' < "
                   "'2026-11-21T12:00:00Z' GROUP BY floor(extract(epoch from t)/604800)*604800 AS \"time\"")


@pytest.mark.parametrize("sql", ["$__unixEpochFilter(t)", "$__timeGroup(t)", "x = $undefined"])
def test_unknown_macros_and_variables_are_errors(sql):
    with pytest.raises(ExpansionError):
        expand(sql, {}, RANGE)


def test_resolve_uses_saved_current_then_first_option_and_all():
    board = {"templating": {"list": [
        {"name": "a", "type": "custom", "query": "x,y,z", "current": {"value": "y"}},
        {"name": "b", "type": "query", "query": "SELECT $a", "multi": True, "includeAll": True, "current": {"value": "$__all"}},
        {"name": "c", "type": "query", "query": "SELECT"},
    ]}}
    seen = []

    def run(sql):
        seen.append(sql)
        return [{"__value": 1, "__text": "one"}, {"__value": 2, "__text": "two"}]

    resolved = resolve_variables(board, run, RANGE)
    assert seen[0] == "SELECT y"
    assert resolved["b"].render() == "'1','2'" and resolved["c"].render() == "1"
    with pytest.raises(ExpansionError):
        resolve_variables(board, run, RANGE, {"a": "nope"})
