"""A raw-SQL query for Grafana's PostgreSQL datasource, as a grafana-foundation-sdk query type.

The SDK ships query types for Prometheus, Loki, Tempo, ... but none for the SQL datasources, so
this is the small custom one: the model (`SqlQuery`, a `cogvariants.Dataquery` with `to_json`)
and its builder (`SqlQueryBuilder`), registered with the SDK runtime so dashboards that contain it
can also be read back with the SDK's `from_json`. Grafana's JSON for it is the one its query
editor saves in code mode: ``refId``, ``datasource``, ``rawSql``, ``format``, ``rawQuery`` and
``editorMode``.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import runtime as cogruntime
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models.dashboard import DataSourceRef

DATASOURCE_TYPE = "grafana-postgresql-datasource"
# The uid given to the datasource in provisioning/datasources/perfci.yaml.
DATASOURCE_UID = "perfci-postgres"
DATASOURCE = DataSourceRef(type_val=DATASOURCE_TYPE, uid=DATASOURCE_UID)

Format = Literal["time_series", "table"]


class SqlQuery(cogvariants.Dataquery):
    def __init__(self, raw_sql: str = "", format_val: Format = "table", ref_id: str = "A",
                 datasource: DataSourceRef | None = None, hide: bool | None = None) -> None:
        self.raw_sql = raw_sql
        self.format_val = format_val
        self.ref_id = ref_id
        self.datasource = datasource or DATASOURCE
        self.hide = hide

    def to_json(self) -> dict[str, object]:
        payload: dict[str, object] = {
            "refId": self.ref_id,
            "datasource": self.datasource,
            "rawSql": self.raw_sql,
            "format": self.format_val,
            "rawQuery": True,
            "editorMode": "code",
        }
        if self.hide is not None:
            payload["hide"] = self.hide
        return payload

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SqlQuery:
        datasource = DataSourceRef.from_json(data["datasource"]) if "datasource" in data else None
        return cls(raw_sql=data.get("rawSql", ""), format_val=data.get("format", "table"),
                   ref_id=data.get("refId", "A"), datasource=datasource, hide=data.get("hide"))


class SqlQueryBuilder(cogbuilder.Builder[SqlQuery]):
    def __init__(self, raw_sql: str) -> None:
        self._internal = SqlQuery(raw_sql=raw_sql)

    def build(self) -> SqlQuery:
        return self._internal

    def ref_id(self, ref_id: str) -> Self:
        self._internal.ref_id = ref_id
        return self

    def format(self, format_val: Format) -> Self:
        self._internal.format_val = format_val
        return self

    def time_series(self) -> Self:
        return self.format("time_series")

    def table(self) -> Self:
        return self.format("table")


cogruntime.Runtime().register_dataquery_variant(
    cogruntime.DataqueryConfig(identifier=DATASOURCE_TYPE, from_json_hook=SqlQuery.from_json)
)
