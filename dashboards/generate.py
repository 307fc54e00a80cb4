"""Build every dashboard and write it as stable JSON: keys sorted, two-space indent, one trailing
newline, so regenerating is a no-op unless the code changed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.builders.dashboard import Dashboard
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from . import JSON_DIR, alerts, lean, overview, trend

FACTORIES: dict[str, Callable[[], Dashboard]] = {
    "overview.json": overview.build,
    "metric-trend.json": trend.build,
    "lean-decomposition.json": lean.build,
    "alerts.json": alerts.build,
}


def render(board: Dashboard) -> str:
    built = board.build()
    for number, panel in enumerate(built.panels or [], start=1):  # stable ids: links and tests name panels
        panel.id_val = number
    return json.dumps(built, cls=JSONEncoder, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def generated() -> dict[str, str]:
    """File name -> JSON text, for every dashboard."""
    return {name: render(factory()) for name, factory in FACTORIES.items()}


def write(directory: Path = JSON_DIR) -> list[str]:
    """Write the dashboards; returns the names of the files that changed."""
    directory.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, text in generated().items():
        path = directory / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(name)
    return changed


def stale(directory: Path = JSON_DIR) -> list[str]:
    """Names of committed files that differ from the code (missing, changed, or not generated)."""
    expected = generated()
    names = [n for n, text in expected.items() if not (directory / n).exists() or (directory / n).read_text() != text]
    names += sorted(p.name for p in directory.glob("*.json") if p.name not in expected)
    return names
