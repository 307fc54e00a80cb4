"""Explanation of an alert group: the lean model over the medians of every metric around its range,
each alerted metric's own why, and the one-line summary. ``sim`` parts name the functions whose
instructions moved and every hazard site; a serial fraction that moved is said with the line
sharing a ``sim`` config of the machine simulated over the same range."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from perfci_core.analysis import explain
from perfci_core.analysis.explain import sharing_text, why
from perfci_core.metrics import function_instructions, hazard_sites

from ..models import Alert, AlertGroup, BenchConfig, Machine
from ..settings import Settings
from . import repository as alert_sql
from . import series_repository as series_sql


def explain_group(session: Session, group: AlertGroup, members: list[Alert], rng: tuple[int, int],
                  others: list[tuple[int, int]], settings: Settings) -> None:
    """Lean-model explanation from the medians of *every* metric of each (config, backend) that
    alerted (``members``), over up to ``explanation_window_commits`` measured commits on each side
    of the group's range ``rng`` (last good, first bad positions), bounded by the ``others``
    groups' ranges (their levels are not this one's)."""
    lg, fb = rng
    prev_fb = max((r[1] for r in others if r[1] <= lg), default=None)
    next_lg = min((r[0] for r in others if r[0] >= fb), default=None)
    lead = lead_alert(members)
    config_names = alert_sql.names(session, BenchConfig, [a.config_id for a in members])
    parts = []
    for config_id, backend in sorted({(a.config_id, a.backend) for a in members}, key=lambda k: k != (lead.config_id, lead.backend)):
        k = settings.explanation_window_commits
        before_at = series_sql.measured_positions_between(session, group.branch_id, group.machine_id, config_id, prev_fb, lg, k, True) if lg >= 0 else []
        after_at = series_sql.measured_positions_between(session, group.branch_id, group.machine_id, config_id, fb, next_lg, k, False)
        before, after = _medians(session, group, config_id, backend, before_at), _medians(session, group, config_id, backend, after_at)
        context: dict[str, Any] = {}
        if backend == "sim" and before_at and after_at:  # where the simulated instructions and hazards went
            context = _where(series_sql.sim_sample_raw(session, group.branch_id, group.machine_id, config_id, before_at[-1]),
                             series_sql.sim_sample_raw(session, group.branch_id, group.machine_id, config_id, after_at[0]))
        if "serial_fraction" in before and "serial_fraction" in after:
            context["sharing"] = _sharing(session, group, (prev_fb, lg, fb, next_lg), k)
        explanation = explain(before, after, **context)
        parts.append({
            "config": config_names.get(config_id, str(config_id)), "backend": backend,
            "cause": explanation.cause, "sentence": explanation.sentence,
            "whys": {a.metric: why(a.metric, before, after, **context) for a in members if (a.config_id, a.backend) == (config_id, backend)},
            "decompositions": [dataclasses.asdict(d) for d in explanation.decompositions],
            "counters": [dataclasses.asdict(c) for c in explanation.counters],
            "before": before, "after": after, "commits_before": len(before_at), "commits_after": len(after_at),
        })
    lead_part = parts[0]
    group.explanation = _json_safe({"cause": lead_part["cause"], "sentence": lead_part["sentence"], "parts": parts})
    group.summary = _summary(session, group, (lg, fb), lead_part, len(members))


def _where(raw_before: dict[str, Any], raw_after: dict[str, Any]) -> dict[str, Any]:
    return {"sites_before": hazard_sites(raw_before), "sites_after": hazard_sites(raw_after),
            "functions_before": function_instructions(raw_before), "functions_after": function_instructions(raw_after)}


def _sharing(session: Session, group: AlertGroup, bounds: tuple[int | None, int, int, int | None], k: int) -> str | None:
    """The line sharing between lcores that a ``sim`` config of the group's machine saw move over the
    group's range (its nearest measured commits on each side), with its sites; None when none moved."""
    prev_fb, lg, fb, next_lg = bounds
    for config_id in series_sql.sim_configs_measuring(session, group.branch_id, group.machine_id, "line_transfers_pp", prev_fb, next_lg):
        before_at = series_sql.measured_positions_between(session, group.branch_id, group.machine_id, config_id, prev_fb, lg, k, True) if lg >= 0 else []
        after_at = series_sql.measured_positions_between(session, group.branch_id, group.machine_id, config_id, fb, next_lg, k, False)
        if not before_at or not after_at:
            continue
        before, after = _medians(session, group, config_id, "sim", before_at), _medians(session, group, config_id, "sim", after_at)
        where = _where(series_sql.sim_sample_raw(session, group.branch_id, group.machine_id, config_id, before_at[-1]),
                       series_sql.sim_sample_raw(session, group.branch_id, group.machine_id, config_id, after_at[0]))
        text = sharing_text(before, after, where["sites_before"], where["sites_after"])
        if text is not None:
            return text
    return None


def _medians(session: Session, group: AlertGroup, config_id: int, backend: str, positions: list[int]) -> dict[str, float]:
    values: dict[str, list[float]] = defaultdict(list)
    for row in series_sql.window_runs(session, group.branch_id, group.machine_id, config_id, positions):
        if row.backend == backend:
            values[row.metric].extend(v for v in row.values if math.isfinite(v))
    return {metric: float(np.median(v)) for metric, v in values.items()}


def _summary(session: Session, group: AlertGroup, rng: tuple[int, int], part: dict[str, Any], n_alerts: int) -> str:
    commits = alert_sql.commits_by_id(session, [group.first_bad_commit_id, group.last_good_commit_id])
    machine = session.get(Machine, group.machine_id)
    first_bad = commits[group.first_bad_commit_id]
    if rng[1] - rng[0] == 1:
        title = subject(first_bad.message)
        where = f"at {first_bad.sha[:12]}" + (f" ({title})" if title else "")
    else:
        last_good = commits.get(group.last_good_commit_id) if group.last_good_commit_id else None
        where = f"in {rng[1] - rng[0]} commits after {last_good.sha[:12] if last_good else 'the start'} up to {first_bad.sha[:12]}"
    sim = " simulated" if part["backend"] == "sim" else ""
    more = f" (+{n_alerts - 1} more metric{'s' if n_alerts > 2 else ''})" if n_alerts > 1 else ""
    return (f"{group.direction.capitalize()} {where} on {machine.name if machine else group.machine_id}, "
            f"{part['config']} ({part['backend']}{sim}): {part['sentence']}{more}")


def candidate_span(session: Session, group: AlertGroup) -> tuple[int, int]:
    """Branch positions of the first and the last commit that may have caused the change."""
    pos = series_sql.positions_of(session, group.branch_id, [group.first_bad_commit_id, group.last_good_commit_id])
    lg = pos.get(group.last_good_commit_id, -1) if group.last_good_commit_id else -1
    return lg + 1, pos[group.first_bad_commit_id]


def subject(message: str) -> str:
    return message.strip().splitlines()[0][:200] if message.strip() else ""


def _json_safe(value: Any) -> Any:
    """JSON has no NaN/inf (PostgreSQL's json rejects them): those become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def lead_alert(alerts: Iterable[Alert]) -> Alert:
    """The alert a group is named after: a regression before an improvement, then the largest move."""
    return min(alerts, key=lambda a: (a.direction != "regression", -abs(a.change_pct) if math.isfinite(a.change_pct) else -math.inf, a.id))
