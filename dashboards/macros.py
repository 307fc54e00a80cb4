"""What Grafana does to a panel's SQL before PostgreSQL sees it, for the tests and the benchmark:
interpolate the dashboard variables, then expand the time macros the panels use.

Variables (Grafana's frontend, SQL datasources):
- ``$name`` / ``${name}``: a single-value variable becomes its raw value; a multi-value or
  include-all variable becomes its values, each quoted as a SQL string, joined by commas
  (so ``col IN ($machine)`` works for both); "All" selects every option. The raw single value
  is why the dashboards never use this form: a value typed into the URL would be SQL.
- ``${name:sqlstring}``: every value quoted as a SQL string (``'`` doubled, wrapped in ``'``),
  joined by commas, single- or multi-value alike (Grafana's documented "sqlstring" format).
- ``${name:csv}`` / ``${name:raw}``: the values joined by commas, unquoted (documented; unsafe
  for values from a URL, modelled so a test can show what they would do).
- A variable that the dashboard does not define is an error here (Grafana leaves it as is and
  PostgreSQL fails later; failing early names it).

Macros (Grafana's PostgreSQL datasource backend), the ones these dashboards use:
- ``$__timeFilter(col)``   -> ``col BETWEEN '<from>' AND '<to>'`` (RFC 3339, UTC)
- ``$__timeFrom()`` / ``$__timeTo()`` -> ``'<from>'`` / ``'<to>'``
- ``$__timeGroup(col, '7d')`` -> ``floor(extract(epoch from col)/604800)*604800``
- ``$__timeGroupAlias(col, '7d')`` -> the same ``AS "time"``
Any other ``$__`` macro is an error, so a panel cannot silently depend on one not modelled here.

Variable options come from running each query variable's SQL (itself interpolated with the
variables before it), as Grafana does on dashboard load; the current value is the dashboard's
saved one when it is among the options, else the first option.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "M": 30 * 86400, "y": 365 * 86400}
_VARIABLE = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\$(\w+)")
_MACRO = re.compile(r"\$__(\w+)\(([^()]*)\)")
ALL = "$__all"


class ExpansionError(ValueError):
    pass


@dataclass(frozen=True)
class TimeRange:
    start: datetime
    end: datetime

    @classmethod
    def from_dashboard(cls, board: Mapping[str, Any], now: datetime) -> TimeRange:
        """The dashboard's default range (e.g. now-90d .. now)."""
        return cls(relative_time(board["time"]["from"], now), relative_time(board["time"]["to"], now))


@dataclass(frozen=True)
class Value:
    values: tuple[str, ...]
    multi: bool  # multi-value or include-all: rendered as a quoted list

    def render(self, format_id: str | None = None) -> str:
        if format_id == "sqlstring" or (format_id is None and self.multi):
            return ",".join(sql_string(v) for v in self.values)
        if format_id in ("csv", "raw"):
            return ",".join(self.values)
        if format_id is not None:
            raise ExpansionError(f"variable format {format_id!r} is not modelled")
        if len(self.values) != 1:
            raise ExpansionError(f"single-value variable with {len(self.values)} values")
        return self.values[0]


def sql_string(value: str) -> str:
    """Grafana's sqlstring quoting of one value: ' doubled, then wrapped in '. Backslashes stay
    as they are, which is exact with PostgreSQL's standard_conforming_strings (on by default)."""
    return "'" + value.replace("'", "''") + "'"


def relative_time(expression: str, now: datetime) -> datetime:
    """``now``, ``now-90d``, ``now-1y``, ``now-6h`` (no rounding suffixes)."""
    match = re.fullmatch(r"now(?:-(\d+)([smhdwMy]))?", expression)
    if not match:
        raise ExpansionError(f"unsupported time expression {expression!r}")
    if match.group(1) is None:
        return now
    return now - timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])


def interval_seconds(interval: str) -> int:
    match = re.fullmatch(r"'?(\d+)([smhdwMy])'?", interval.strip())
    if not match:
        raise ExpansionError(f"unsupported interval {interval!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def interpolate(sql: str, variables: Mapping[str, Value]) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        if name.startswith("__"):
            return match.group(0)  # a macro or a Grafana built-in: not a dashboard variable
        if name not in variables:
            raise ExpansionError(f"unknown variable ${name}")
        return variables[name].render(match.group(2))

    return _VARIABLE.sub(replace, sql)


def expand_macros(sql: str, time_range: TimeRange) -> str:
    start, end = f"'{_rfc3339(time_range.start)}'", f"'{_rfc3339(time_range.end)}'"

    def replace(match: re.Match[str]) -> str:
        name, args = match.group(1), [a.strip() for a in match.group(2).split(",")] if match.group(2).strip() else []
        if name == "timeFilter" and len(args) == 1:
            return f"{args[0]} BETWEEN {start} AND {end}"
        if name == "timeFrom" and not args:
            return start
        if name == "timeTo" and not args:
            return end
        if name in ("timeGroup", "timeGroupAlias") and len(args) == 2:
            seconds = interval_seconds(args[1])
            group = f"floor(extract(epoch from {args[0]})/{seconds})*{seconds}"
            return group + (' AS "time"' if name == "timeGroupAlias" else "")
        raise ExpansionError(f"unsupported macro $__{name}({match.group(2)})")

    expanded = _MACRO.sub(replace, sql)
    if "$__" in expanded:
        raise ExpansionError(f"unexpanded macro in: {expanded[expanded.index('$__'):][:60]}")
    return expanded


def expand(sql: str, variables: Mapping[str, Value], time_range: TimeRange) -> str:
    """Variables first (Grafana's frontend), then macros (its datasource backend)."""
    return expand_macros(interpolate(sql, variables), time_range)


def resolve_variables(board: Mapping[str, Any], run: Callable[[str], Sequence[Mapping[str, Any]]],
                      time_range: TimeRange, chosen: Mapping[str, str | list[str]] | None = None) -> dict[str, Value]:
    """Every variable's current value, in the dashboard's order; ``chosen`` overrides by option value."""
    chosen = chosen or {}
    resolved: dict[str, Value] = {}
    for variable in board.get("templating", {}).get("list", []):
        name, kind = variable["name"], variable["type"]
        if kind == "query":
            rows = run(expand(variable["query"], resolved, time_range))
            options = [str(row["__value"] if "__value" in row else next(iter(row.values()))) for row in rows]
        elif kind == "custom":
            options = [o.strip() for o in variable["query"].split(",") if o.strip()]
        else:
            raise ExpansionError(f"variable type {kind!r} ({name}) is not modelled")
        if not options:
            raise ExpansionError(f"variable ${name} has no options")
        multi = bool(variable.get("multi") or variable.get("includeAll"))
        want = chosen.get(name, (variable.get("current") or {}).get("value"))
        wanted = [want] if isinstance(want, str) else list(want or [])
        if wanted in ([ALL], ["All"]) and variable.get("includeAll"):
            values = options
        else:
            matched = [v for v in wanted if v in options]
            if name in chosen and len(matched) != len(wanted):
                raise ExpansionError(f"${name}: {chosen[name]!r} is not among the options {options[:10]}")
            values = matched or options[:1]
        resolved[name] = Value(tuple(values), multi)
    return resolved


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str  # panel title, or "annotation: <name>"
    panel_type: str  # timeseries / trend / table / stat / annotation
    format: str  # time_series / table
    sql: str
    panel_json: Mapping[str, Any]


def panel_queries(board: Mapping[str, Any]) -> list[PanelQuery]:
    """Every SQL query a dashboard runs: panel targets and annotations."""
    found = []
    for panel in board.get("panels", []):
        for target in panel.get("targets", []):
            found.append(PanelQuery(board["uid"], panel["title"], panel["type"], target["format"], target["rawSql"], panel))
    for annotation in board.get("annotations", {}).get("list", []):
        target = annotation.get("target") or {}
        if "rawSql" in target:
            found.append(PanelQuery(board["uid"], f"annotation: {annotation['name']}", "annotation", target["format"],
                                    target["rawSql"], annotation))
    return found
