"""SQL for what detection reads: runs awaiting detection, the measured commits of a series, its
runs in a window (and the window cache), and branch positions."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Row, case, func, select, text, update
from sqlalchemy.orm import Session

from .. import db
from ..models import (
    BranchCommit,
    Commit,
    DetectionWindow,
    Job,
    JobState,
    MetricValue,
    Run,
    RunStatus,
    Sample,
)

_PENDING = (Run.status == RunStatus.OK.value) & Run.detected_at.is_(None)  # ix_runs_detection_pending


def lock_pending_runs(session: Session, machine_id: int, limit: int) -> Sequence[Row[Any]]:
    """(id, commit_id, config_id, round) of the machine's oldest ``limit`` successful runs detection
    has not analysed, locked for the transaction; runs another detection holds are skipped (that
    one does them)."""
    statement = (
        select(Run.id, Job.commit_id, Job.config_id, Job.round)
        .join(Job, Job.id == Run.job_id)
        .where(_PENDING, Job.machine_id == machine_id)
        .order_by(Run.id)
        .limit(limit)
        .with_for_update(of=Run, skip_locked=True)
    )
    return session.execute(statement).all()


def mark_detected(session: Session, run_ids: Sequence[int], now: datetime) -> None:
    session.execute(update(Run).where(Run.id.in_(run_ids)).values(detected_at=now))


def mark_newest_runs_pending(session: Session, branch_id: int, machine_id: int) -> int:
    """Mark the newest successful run of each config of a branch x machine not analysed, so that
    detection (and, if its task is lost, the straggler sweep) examines those series again."""
    newest = (
        select(func.max(Run.id))
        .join(Job, Job.id == Run.job_id)
        .join(BranchCommit, BranchCommit.commit_id == Job.commit_id)
        .where(BranchCommit.branch_id == branch_id, Job.machine_id == machine_id, Run.status == RunStatus.OK.value)
        .group_by(Job.config_id)
    )
    run_ids = list(session.scalars(newest))
    if run_ids:
        session.execute(update(Run).where(Run.id.in_(run_ids)).values(detected_at=None))
    return len(run_ids)


def machines_of_branch(session: Session, branch_id: int) -> list[int]:
    """Machines with a successful run of a commit on the branch."""
    statement = (
        select(Job.machine_id).distinct()
        .join(Run, Run.job_id == Job.id)
        .join(BranchCommit, BranchCommit.commit_id == Job.commit_id)
        .where(BranchCommit.branch_id == branch_id, Run.status == RunStatus.OK.value)
        .order_by(Job.machine_id)
    )
    return list(session.scalars(statement))


def machines_with_pending_runs(session: Session, received_before: datetime) -> list[int]:
    """Machines with a successful run received before ``received_before`` and still not analysed."""
    statement = (
        select(Job.machine_id)
        .join(Run, Run.job_id == Job.id)
        .where(_PENDING, Run.received_at < received_before)
        .distinct()
        .order_by(Job.machine_id)
    )
    return list(session.scalars(statement))


def branches_of_commits(session: Session, commit_ids: Iterable[int]) -> dict[int, list[int]]:
    """Commit id -> the branches it is on (one query for a whole batch of runs)."""
    statement = select(BranchCommit.commit_id, BranchCommit.branch_id).where(BranchCommit.commit_id.in_(set(commit_ids)))
    branches: dict[int, list[int]] = {}
    for commit_id, branch_id in session.execute(statement.order_by(BranchCommit.branch_id)):
        branches.setdefault(commit_id, []).append(branch_id)
    return branches


def lock_branch_machine(session: Session, branch_id: int, machine_id: int) -> None:
    """Serialise detection of one branch x machine until the transaction ends (PostgreSQL
    advisory lock): groups span every config and metric of the machine, so two tasks must not
    match and create groups at the same time. SQLite runs one writer at a time anyway."""
    if not db.is_postgresql(session):
        return
    digest = hashlib.blake2b(f"perfci.alerts:{branch_id}:{machine_id}".encode(), digest_size=8).digest()
    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": int.from_bytes(digest, "big", signed=True)})


def measured_commits(session: Session, branch_id: int, machine_id: int, config_id: int, limit: int,
                     before: int | None = None, after: int | None = None) -> list[tuple[int, int]]:
    """(branch position, commit id) of the last ``limit`` commits measured on machine x config
    (ascending); with ``before``, the last ones at or before that position; with ``after``, the
    first ones after it."""
    statement = (
        select(BranchCommit.position, BranchCommit.commit_id)
        .join(Job, Job.commit_id == BranchCommit.commit_id)
        .where(BranchCommit.branch_id == branch_id, Job.machine_id == machine_id, Job.config_id == config_id,
               Job.state == JobState.DONE.value,
               Job.round == 0)  # a commit once, however many confirmation rounds it had
        .order_by(BranchCommit.position if after is not None else BranchCommit.position.desc())
        .limit(limit)
    )
    if before is not None:
        statement = statement.where(BranchCommit.position <= before)
    if after is not None:
        statement = statement.where(BranchCommit.position > after)
    return sorted({(position, commit_id) for position, commit_id in session.execute(statement)})


def pending_commits(session: Session, machine_id: int, config_id: int) -> set[int]:
    """Commits of the machine x config with a successful run detection has not analysed yet
    (held by this detection or another)."""
    statement = select(Job.commit_id).join(Run, Run.job_id == Job.id).where(_PENDING, Job.machine_id == machine_id,
                                                                            Job.config_id == config_id, Job.round >= 0)
    return set(session.scalars(statement))


def detection_window(session: Session, branch_id: int, machine_id: int, config_id: int) -> DetectionWindow | None:
    return session.get(DetectionWindow, (branch_id, machine_id, config_id))


def save_detection_window(session: Session, branch_id: int, machine_id: int, config_id: int, version: str, data: bytes) -> None:
    row = session.get(DetectionWindow, (branch_id, machine_id, config_id))
    if row is None:
        session.add(DetectionWindow(branch_id=branch_id, machine_id=machine_id, config_id=config_id, version=version, data=data))
    else:
        row.version, row.data = version, data


def first_measured_position(session: Session, branch_id: int, machine_id: int, config_id: int) -> int | None:
    statement = (
        select(func.min(BranchCommit.position))
        .join(Job, Job.commit_id == BranchCommit.commit_id)
        .where(BranchCommit.branch_id == branch_id, Job.machine_id == machine_id, Job.config_id == config_id,
               Job.state == JobState.DONE.value)
    )
    return session.scalar(statement)


class WindowRun(NamedTuple):
    position: int
    commit_id: int
    sha: str
    metric: str
    backend: str
    run_id: int
    values: list[float]  # the run's repetitions in order, those without a value left out
    noisy: bool
    pair: int


def window_runs(
    session: Session, branch_id: int, machine_id: int, config_id: int, positions: Sequence[int]
) -> list[WindowRun]:
    """One row per run x metric x backend measured at these positions, in commit order (then
    metric, backend, run): (position, commit_id, sha, metric, backend, run_id, values, noisy,
    pair). ``values``: the run's repetitions in repetition order, a repetition without a value
    for the metric left out (no row when none has one); ``noisy``: the run carries the agent's
    noisy mark; ``pair``: the key of the confirmation session the run was part of (the lower of
    its job and the partner job it names), 0 for a commit's own run (round 0, even one a bisect
    measured interleaved). A pull request's runs (rounds below 0) are not the branch's: left out."""
    if not positions:
        return []
    statement = (
        select(BranchCommit.position, MetricValue.commit_id, Commit.sha, MetricValue.metric, MetricValue.backend,
               MetricValue.run_id, MetricValue.rep_values, Run.noisy.is_not(None).label("noisy"),
               case((Job.round > 0, Run.session_key), else_=0).label("pair"))
        .join(BranchCommit, BranchCommit.commit_id == MetricValue.commit_id)
        .join(Commit, Commit.id == MetricValue.commit_id)
        .join(Run, Run.id == MetricValue.run_id)
        .join(Job, Job.id == Run.job_id)
        .where(
            Job.round >= 0,
            BranchCommit.branch_id == branch_id,
            BranchCommit.position.in_(list(positions)),
            MetricValue.machine_id == machine_id,
            MetricValue.config_id == config_id,
        )
        .order_by(BranchCommit.position, MetricValue.metric, MetricValue.backend, MetricValue.run_id)
    )
    # ~9 000 rows for a 200-commit window: Core rows (not the ORM's), the arrays as the driver reads them.
    out = []
    for row in session.connection().execute(statement):
        values = row[6]
        if None in values:
            values = [v for v in values if v is not None]
            if not values:
                continue
            row = (*row[:6], values, *row[7:])
        out.append(WindowRun._make(row))
    return out


def sim_sample_raw(
    session: Session, branch_id: int, machine_id: int, config_id: int, position: int
) -> dict[str, Any]:
    """The raw counts of one ``sim`` sample of the commit at ``position`` (deterministic: any
    repetition stands for all), or {} when there is none: where the explanation finds the sites
    of the simulated memory hazards. The newest such sample that has a ``sim`` ipp value."""
    runs = (
        select(MetricValue.run_id, MetricValue.rep_values)
        .join(BranchCommit, BranchCommit.commit_id == MetricValue.commit_id)
        .where(
            BranchCommit.branch_id == branch_id,
            BranchCommit.position == position,
            MetricValue.machine_id == machine_id,
            MetricValue.config_id == config_id,
            MetricValue.backend == "sim",
            MetricValue.metric == "ipp",
        )
    )
    valued: dict[int, list[float | None]] = {run_id: rep_values for run_id, rep_values in session.execute(runs)}
    if not valued:
        return {}
    samples = session.execute(
        select(Sample.id, Sample.run_id, Sample.raw).where(Sample.run_id.in_(list(valued))).order_by(Sample.run_id, Sample.rep)
    ).all()
    newest, index = None, {}
    for sample in samples:  # in rep order per run: the i-th is rep_values[i]'s
        i = index[sample.run_id] = index.get(sample.run_id, -1) + 1
        if valued[sample.run_id][i] is not None and (newest is None or sample.id > newest.id):
            newest = sample
    return (newest.raw if newest is not None else None) or {}


def sim_configs_measuring(session: Session, branch_id: int, machine_id: int, metric: str, lo: int | None,
                          hi: int | None) -> list[int]:
    """The configs with a ``sim`` value of ``metric`` on the machine at a branch position in [lo, hi] (None: unbounded)."""
    statement = (
        select(MetricValue.config_id).distinct()
        .join(BranchCommit, BranchCommit.commit_id == MetricValue.commit_id)
        .where(BranchCommit.branch_id == branch_id, MetricValue.machine_id == machine_id, MetricValue.backend == "sim",
               MetricValue.metric == metric)
        .order_by(MetricValue.config_id)
    )
    if lo is not None:
        statement = statement.where(BranchCommit.position >= lo)
    if hi is not None:
        statement = statement.where(BranchCommit.position <= hi)
    return list(session.scalars(statement))


def measured_positions_between(
    session: Session, branch_id: int, machine_id: int, config_id: int, lo: int | None, hi: int | None,
    limit: int, newest_first: bool,
) -> list[int]:
    """Up to ``limit`` measured positions in [lo, hi] nearest to one end (the explanation windows)."""
    statement = (
        select(BranchCommit.position)
        .join(Job, Job.commit_id == BranchCommit.commit_id)
        .where(BranchCommit.branch_id == branch_id, Job.machine_id == machine_id, Job.config_id == config_id,
               Job.state == JobState.DONE.value, Job.round == 0)
        .order_by(BranchCommit.position.desc() if newest_first else BranchCommit.position)
        .limit(limit)
    )
    if lo is not None:
        statement = statement.where(BranchCommit.position >= lo)
    if hi is not None:
        statement = statement.where(BranchCommit.position <= hi)
    return sorted(session.scalars(statement))


def positions_of(session: Session, branch_id: int, commit_ids: Iterable[int]) -> dict[int, int]:
    ids = [c for c in set(commit_ids) if c is not None]
    if not ids:
        return {}
    rows = session.execute(
        select(BranchCommit.commit_id, BranchCommit.position).where(BranchCommit.branch_id == branch_id, BranchCommit.commit_id.in_(ids))
    )
    return {commit_id: position for commit_id, position in rows}


def commits_at(session: Session, branch_id: int, lo: int, hi: int) -> list[int]:
    """Commit ids at branch positions lo..hi."""
    statement = select(BranchCommit.commit_id).where(BranchCommit.branch_id == branch_id, BranchCommit.position.between(lo, hi))
    return list(session.scalars(statement))


# --- groups and alerts ----------------------------------------------------------------------
