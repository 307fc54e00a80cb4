"""Dashboard variables cannot be turned into SQL: every query of every dashboard (panels,
annotations, variable queries), expanded the way Grafana expands it, runs on the seeded
PostgreSQL with hostile values in each variable (as anyone can put in a dashboard URL). Each run
either fails with PostgreSQL reading the whole value as one literal of the column's type, or
returns exactly what an ordinary absent value returns; no error or row shows the webhook secret,
and no statement smuggled in a value runs."""

from __future__ import annotations

import json
import re

import psycopg
import pytest

from dashboards import JSON_DIR
from dashboards.generate import FACTORIES
from dashboards.macros import TimeRange, Value, expand, resolve_variables

pytestmark = pytest.mark.services

LEAK = "(SELECT cast(webhook_secret AS int) FROM repositories LIMIT 1)"
HOSTILE = (
    f"x' AND 1 = {LEAK} AND 'a'='a",  # error-based leak through a quoted string
    f"1 AND 1 = {LEAK}",  # the same through a bare number
    f"x\\' AND 1 = {LEAK} AND 'a'='a",  # backslash before the quote
    "x' OR (SELECT count(*) FROM repositories) > 0 OR 'a'='b",  # widen the read
    "1 OR 1 = 1",
    "x'; UPDATE repositories SET name = 'pwned'; --",  # stacked statements
    "1; UPDATE repositories SET name = 'pwned'; --",
    f"$__timeFrom() AND 1 = {LEAK} AND $__timeFrom()",  # a macro inside the value (Grafana's backend expands it)
)
ABSENT = "no-such-value"
INVALID_TEXT = "22P02"  # invalid_text_representation: the value, read whole, is not a number
SYNTAX_ERROR = "42601"


def _variables_used(sql: str) -> set[str]:
    names = {m.group(1) or m.group(2) for m in re.finditer(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", sql)}
    return {n for n in names if not n.startswith("__")}  # $__ are macros and Grafana built-ins


def _queries(board: dict) -> list[tuple[str, str]]:
    """(name, SQL) of every query the dashboard runs, the variable queries included."""
    found = [(f"panel: {panel['title']}", target["rawSql"])
             for panel in board.get("panels", []) for target in panel.get("targets", [])]
    found += [(f"annotation: {a['name']}", a["target"]["rawSql"])
              for a in board.get("annotations", {}).get("list", []) if "rawSql" in (a.get("target") or {})]
    found += [(f"variable: {v['name']}", v["query"]) for v in board.get("templating", {}).get("list", [])
              if v["type"] == "query"]
    return found


def _outcome(run_sql, sql: str):
    try:
        return "rows", run_sql(sql)
    except psycopg.Error as exc:
        return "error", exc


@pytest.fixture
def secret(run_sql) -> str:
    [row] = run_sql("SELECT webhook_secret FROM repositories")
    return row["webhook_secret"]


def test_postgresql_reads_backslashes_literally(run_sql):
    """Grafana's sqlstring doubles quotes and leaves backslashes: exact only with this setting."""
    assert run_sql("SHOW standard_conforming_strings") == [{"standard_conforming_strings": "on"}]


def test_every_variable_reference_is_sqlstring_formatted():
    for file in FACTORIES:
        board = json.loads((JSON_DIR / file).read_text())
        for name, sql in _queries(board):
            bare = [m.group(0) for m in re.finditer(r"\$\{?(?!__)(\w+)(:\w+)?\}?", sql) if m.group(2) != ":sqlstring"]
            assert not bare, f"{file} {name}: {bare} is not ${{var:sqlstring}}"


@pytest.mark.parametrize("file", sorted(FACTORIES))
def test_hostile_variable_values_stay_literals(run_sql, seeded_db, secret, file):
    _, _, now = seeded_db
    board = json.loads((JSON_DIR / file).read_text())
    time_range = TimeRange.from_dashboard(board, now)
    defaults = resolve_variables(board, run_sql, time_range)
    names_before = run_sql("SELECT id, name, webhook_secret FROM repositories ORDER BY id")
    checked = 0
    for query_name, sql in _queries(board):
        for variable in sorted(_variables_used(sql)):
            multi = defaults[variable].multi

            def run_with(value: str, values: tuple[str, ...] | None = None):
                chosen = dict(defaults, **{variable: Value(values or (value,), multi)})
                return _outcome(run_sql, expand(sql, chosen, time_range))

            absent = run_with(ABSENT)
            for payload in HOSTILE:
                values = (payload, *defaults[variable].values) if multi else None
                kind, result = run_with(payload, values)
                where = f"{file} {query_name} ${variable} = {payload!r}"
                assert secret not in str(result), f"{where}: the secret leaked: {result}"
                if kind == "error":
                    allowed = {INVALID_TEXT} | ({SYNTAX_ERROR} if "$__" in payload else set())
                    assert result.sqlstate in allowed, f"{where}: {result.sqlstate} {result}"
                    if result.sqlstate == INVALID_TEXT:
                        assert f'"{payload}"' in str(result), f"{where}: not read as one literal: {result}"
                elif multi:  # the hostile value next to the real ones selects what the real ones select
                    assert result == run_with("", defaults[variable].values)[1], where
                else:
                    assert absent[0] == "rows" and result == absent[1], f"{where}: read differs from an absent value"
                checked += 1
    assert checked >= len(HOSTILE) * 5
    assert run_sql("SELECT id, name, webhook_secret FROM repositories ORDER BY id") == names_before


def test_the_check_catches_a_raw_variable(run_sql, seeded_db, secret):
    """The same query with the value spliced raw (what the dashboards did) leaks the secret: the
    assertions above can fail."""
    _, _, now = seeded_db
    board = json.loads((JSON_DIR / "metric-trend.json").read_text())
    time_range = TimeRange.from_dashboard(board, now)
    variables = dict(resolve_variables(board, run_sql, time_range), metric=Value((HOSTILE[0],), False))
    [commits] = [t["rawSql"] for p in board["panels"] if p["title"] == "Commits" for t in p["targets"]]
    raw = commits.replace("${metric:sqlstring}", "'${metric:raw}'")
    kind, result = _outcome(run_sql, expand(raw, variables, time_range))
    assert kind == "error" and secret in str(result)
