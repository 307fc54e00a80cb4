"""SQL of the bisect domain."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from ..models import (Alert, AlertGroup, BenchConfig, Bisect, BisectStatus, Branch, BranchCommit, Commit, Job, Machine,
                      MetricValue, Repository, Run, RunStatus)


def machines_named(session: Session, name: str) -> list[Machine]:
    return list(session.scalars(select(Machine).where(Machine.name == name).order_by(Machine.id)))


def config_by_name(session: Session, name: str) -> BenchConfig | None:
    return session.scalar(select(BenchConfig).where(BenchConfig.name == name))


def position(session: Session, branch_id: int, commit_id: int) -> int | None:
    return session.scalar(select(BranchCommit.position).where(BranchCommit.branch_id == branch_id, BranchCommit.commit_id == commit_id))


def commit_ids_between(session: Session, branch_id: int, first: int, last: int) -> list[int]:
    """Commit ids on the branch from position ``first`` to ``last`` inclusive, in branch order."""
    statement = (
        select(BranchCommit.commit_id)
        .where(BranchCommit.branch_id == branch_id, BranchCommit.position.between(first, last))
        .order_by(BranchCommit.position)
    )
    return list(session.scalars(statement))


def commits(session: Session, commit_ids: Sequence[int]) -> dict[int, Commit]:
    return {c.id: c for c in session.scalars(select(Commit).where(Commit.id.in_(commit_ids)))}


def add(session: Session, bisect: Bisect) -> Bisect:
    session.add(bisect)
    session.flush()
    return bisect


def get(session: Session, bisect_id: int) -> Bisect | None:
    return session.get(Bisect, bisect_id)


def lock(session: Session, bisect_id: int) -> Bisect | None:
    """The row, locked: two results arriving together advance the search one after the other."""
    return session.scalar(select(Bisect).where(Bisect.id == bisect_id).with_for_update())


def for_alert_group(session: Session, group_id: int) -> Bisect | None:
    return session.scalar(select(Bisect).where(Bisect.alert_group_id == group_id).order_by(Bisect.id.desc()).limit(1))


def running_ids(session: Session, machine_id: int | None = None, config_id: int | None = None) -> list[int]:
    statement = select(Bisect.id).where(Bisect.status == BisectStatus.RUNNING.value).order_by(Bisect.id)
    if machine_id is not None:
        statement = statement.where(Bisect.machine_id == machine_id)
    if config_id is not None:
        statement = statement.where(Bisect.config_id == config_id)
    return list(session.scalars(statement))


def list_statement(status: str | None = None, machine_id: int | None = None) -> Select[tuple[Bisect]]:
    statement = select(Bisect).order_by(Bisect.id.desc())
    if status is not None:
        statement = statement.where(Bisect.status == status)
    if machine_id is not None:
        statement = statement.where(Bisect.machine_id == machine_id)
    return statement


def values(session: Session, commit_ids: Sequence[int], machine_id: int, config_id: int, metric: str, backend: str
           ) -> dict[int, list[tuple[float, int]]]:
    """Every stored repetition of the metric per commit (all successful runs on machine x config),
    each with its run's interleaved-session key (:attr:`Run.session_key`, 0: measured alone)."""
    statement = (
        select(MetricValue.commit_id, MetricValue.rep_values, Run.session_key)
        .join(Run, Run.id == MetricValue.run_id)
        .where(MetricValue.commit_id.in_(commit_ids), MetricValue.machine_id == machine_id, MetricValue.config_id == config_id,
               MetricValue.metric == metric, MetricValue.backend == backend)
        .order_by(MetricValue.commit_id, MetricValue.run_id)
    )
    out: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for commit_id, rep_values, key in session.execute(statement):
        out[commit_id].extend((v, key) for v in rep_values if v is not None)
    return dict(out)


def job_states(session: Session, commit_ids: Sequence[int], machine_id: int, config_id: int) -> dict[int, tuple[str, list[str]]]:
    """Per commit: its job's state and the statuses of the job's runs (oldest first)."""
    statement = (
        select(Job.commit_id, Job.state, Run.status)
        .outerjoin(Run, Run.job_id == Job.id)
        .where(Job.commit_id.in_(commit_ids), Job.machine_id == machine_id, Job.config_id == config_id,
               Job.round == 0)  # the step's own job (confirmation rounds are detection's)
        .order_by(Job.commit_id, Run.attempt)
    )
    out: dict[int, tuple[str, list[str]]] = {}
    for commit_id, state, run_status in session.execute(statement):
        runs = out.setdefault(commit_id, (state, []))[1]
        if run_status is not None:
            runs.append(run_status)
    return out


def unbuildable_runs(statuses: list[str]) -> bool:
    return RunStatus.BUILD_FAILED.value in statuses


def alert_group_with_rows(session: Session, group_id: int) -> tuple[AlertGroup, list[Alert]] | None:
    group = session.get(AlertGroup, group_id)
    if group is None:
        return None
    rows = list(session.scalars(select(Alert).where(Alert.group_id == group_id).order_by(Alert.id)))
    return group, rows


def describe(session: Session, bisect: Bisect) -> dict[str, Any]:
    """Names the read model shows next to the ids (repository, branch, machine, config)."""
    row = session.execute(
        select(Repository.name, Branch.name, Machine.name, BenchConfig.name)
        .join(Branch, Branch.repository_id == Repository.id)
        .join(Machine, Machine.id == bisect.machine_id)
        .join(BenchConfig, BenchConfig.id == bisect.config_id)
        .where(Repository.id == bisect.repository_id, Branch.id == bisect.branch_id)
    ).one()
    return {"repository": row[0], "branch": row[1], "machine": row[2], "config": row[3]}
