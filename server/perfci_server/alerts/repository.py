"""SQL for detection input (series windows), alert groups and alerts, and the CI check."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Row, Select, and_, delete, exists, func, select, text, update
from sqlalchemy.orm import Session, aliased

from .. import db
from ..bounded import BIGINT_MAX
from ..models import (
    ACTIVE_STATES,
    Alert,
    AlertGroup,
    AlertStatus,
    BenchConfig,
    Branch,
    BranchCommit,
    Commit,
    CommitStatus,
    DetectionWindow,
    Job,
    JobPurpose,
    JobState,
    Machine,
    MetricValue,
    Repository,
    Run,
    RunStatus,
    Sample,
    StatusScope,
    Suspect,
    SuspectState,
)

# --- detection input ------------------------------------------------------------------------


_PENDING = (Run.status == RunStatus.OK.value) & Run.detected_at.is_(None)  # ix_runs_detection_pending


def lock_pending_runs(session: Session, machine_id: int, limit: int) -> Sequence[Row[Any]]:
    """(id, commit_id, config_id) of the machine's oldest ``limit`` successful runs detection has
    not analysed, locked for the transaction; runs another detection holds are skipped (that one
    does them)."""
    statement = (
        select(Run.id, Job.commit_id, Job.config_id)
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
                                                                            Job.config_id == config_id)
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
    noisy mark; ``pair``: the key of the interleaved session the run was part of (the lower of
    its job and the partner job it names; 0 when measured alone)."""
    if not positions:
        return []
    statement = (
        select(BranchCommit.position, MetricValue.commit_id, Commit.sha, MetricValue.metric, MetricValue.backend,
               MetricValue.run_id, MetricValue.rep_values, Run.noisy.is_not(None).label("noisy"), Run.session_key.label("pair"))
        .join(BranchCommit, BranchCommit.commit_id == MetricValue.commit_id)
        .join(Commit, Commit.id == MetricValue.commit_id)
        .join(Run, Run.id == MetricValue.run_id)
        .where(
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


def groups_of(session: Session, branch_id: int, machine_id: int) -> list[AlertGroup]:
    statement = select(AlertGroup).where(AlertGroup.branch_id == branch_id, AlertGroup.machine_id == machine_id).order_by(AlertGroup.id)
    return list(session.scalars(statement))


def alerts_of_groups(session: Session, group_ids: Sequence[int]) -> list[Alert]:
    if not group_ids:
        return []
    return list(session.scalars(select(Alert).where(Alert.group_id.in_(list(group_ids))).order_by(Alert.id)))


def group_by_id(session: Session, group_id: int, lock: bool = False) -> AlertGroup | None:
    statement = select(AlertGroup).where(AlertGroup.id == group_id)
    if lock:
        statement = statement.with_for_update()
    return session.scalar(statement)


def delete_alerts(session: Session, alert_ids: Sequence[int]) -> None:
    if alert_ids:
        session.execute(delete(Alert).where(Alert.id.in_(list(alert_ids))))


def configs_of_machine_on_branch(session: Session, branch_id: int, machine_id: int) -> list[int]:
    statement = (
        select(Job.config_id)
        .join(BranchCommit, BranchCommit.commit_id == Job.commit_id)
        .where(BranchCommit.branch_id == branch_id, Job.machine_id == machine_id, Job.state == JobState.DONE.value)
        .distinct()
        .order_by(Job.config_id)
    )
    return list(session.scalars(statement))


# --- reads ----------------------------------------------------------------------------------


def groups_statement(
    status: str | None = None,
    direction: str | None = None,
    machine_id: int | None = None,
    repository_id: int | None = None,
    branch: str | None = None,
    config: str | None = None,
    metric: str | None = None,
) -> Select[tuple[AlertGroup]]:
    """Alert groups, newest first; config/metric keep groups with at least one such alert."""
    statement = select(AlertGroup).order_by(AlertGroup.id.desc())
    if status is not None:
        statement = statement.where(AlertGroup.status == status)
    if direction is not None:
        statement = statement.where(AlertGroup.direction == direction)
    if machine_id is not None:
        statement = statement.where(AlertGroup.machine_id == machine_id)
    if repository_id is not None:
        statement = statement.where(AlertGroup.repository_id == repository_id)
    if branch is not None:
        statement = statement.where(AlertGroup.branch_id.in_(select(Branch.id).where(Branch.name == branch)))
    if config is not None or metric is not None:
        condition = [Alert.group_id == AlertGroup.id]
        if config is not None:
            condition.append(Alert.config_id.in_(select(BenchConfig.id).where(BenchConfig.name == config)))
        if metric is not None:
            condition.append(Alert.metric == metric)
        statement = statement.where(exists().where(and_(*condition)))
    return statement


def names(session: Session, model: Any, ids: Iterable[int]) -> dict[int, str]:
    wanted = list({i for i in ids if i is not None})
    if not wanted:
        return {}
    return {row_id: name for row_id, name in session.execute(select(model.id, model.name).where(model.id.in_(wanted)))}


def commits_by_id(session: Session, ids: Iterable[int]) -> dict[int, Commit]:
    wanted = list({i for i in ids if i is not None})
    if not wanted:
        return {}
    return {c.id: c for c in session.scalars(select(Commit).where(Commit.id.in_(wanted)))}


def branch_positions(session: Session, pairs: Iterable[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """(branch_id, commit_id) -> position for the given pairs."""
    pairs = {p for p in pairs if p[1] is not None}
    if not pairs:
        return {}
    branch_ids = {b for b, _ in pairs}
    commit_ids = {c for _, c in pairs}
    rows = session.execute(
        select(BranchCommit.branch_id, BranchCommit.commit_id, BranchCommit.position).where(
            BranchCommit.branch_id.in_(branch_ids), BranchCommit.commit_id.in_(commit_ids)
        )
    )
    return {(b, c): p for b, c, p in rows if (b, c) in pairs}


# --- the CI check ---------------------------------------------------------------------------


def commits_with_sha(session: Session, sha: str, repository: str | None) -> list[Commit]:
    statement = select(Commit).where(Commit.sha == sha)
    if repository is not None:
        statement = statement.join(Repository, Repository.id == Commit.repository_id).where(Repository.name == repository)
    return list(session.scalars(statement))


def machine_ids(session: Session, machine: str | None) -> list[int] | None:
    """Ids of machines named (or numbered) ``machine``: a changed fingerprint keeps the name on a
    new row, so a name can stand for several. None means every machine."""
    if machine is None:
        return None
    condition = Machine.name == machine
    if machine.isdigit() and int(machine) <= BIGINT_MAX:  # a larger number can only be a name
        condition = condition | (Machine.id == int(machine))
    return list(session.scalars(select(Machine.id).where(condition)))


def implicating_groups(session: Session, commit_ids: Sequence[int], machine_ids: Sequence[int] | None,
                       untriaged_regressions_only: bool = True) -> list[AlertGroup]:
    """Groups whose suspected range (last good, first bad] on their branch contains a commit."""
    if not commit_ids:
        return []
    at_commit = aliased(BranchCommit)
    first_bad = aliased(BranchCommit)
    last_good = aliased(BranchCommit)
    in_range = (
        select(AlertGroup.id)
        .join(at_commit, and_(at_commit.branch_id == AlertGroup.branch_id, at_commit.commit_id.in_(list(commit_ids))))
        .join(first_bad, and_(first_bad.branch_id == AlertGroup.branch_id, first_bad.commit_id == AlertGroup.first_bad_commit_id))
        .outerjoin(last_good, and_(last_good.branch_id == AlertGroup.branch_id, last_good.commit_id == AlertGroup.last_good_commit_id))
        .where(at_commit.position <= first_bad.position, at_commit.position > func.coalesce(last_good.position, -1))
    )
    statement = select(AlertGroup).where(AlertGroup.id.in_(in_range)).order_by(AlertGroup.id)
    if untriaged_regressions_only:
        statement = statement.where(AlertGroup.status == "untriaged", AlertGroup.direction == "regression")
    if machine_ids is not None:
        statement = statement.where(AlertGroup.machine_id.in_(list(machine_ids)))
    return list(session.scalars(statement))


def implicating_groups_by_commit(session: Session, commit_ids: Sequence[int], machine_id: int) -> dict[int, list[AlertGroup]]:
    """Per commit, the machine's untriaged regression groups whose range (last good, first bad]
    contains it (implicating_groups for many commits in one query), by group id."""
    if not commit_ids:
        return {}
    at_commit = aliased(BranchCommit)
    first_bad = aliased(BranchCommit)
    last_good = aliased(BranchCommit)
    statement = (
        select(at_commit.commit_id, AlertGroup)
        .join(at_commit, and_(at_commit.branch_id == AlertGroup.branch_id, at_commit.commit_id.in_(list(commit_ids))))
        .join(first_bad, and_(first_bad.branch_id == AlertGroup.branch_id, first_bad.commit_id == AlertGroup.first_bad_commit_id))
        .outerjoin(last_good, and_(last_good.branch_id == AlertGroup.branch_id, last_good.commit_id == AlertGroup.last_good_commit_id))
        .where(at_commit.position <= first_bad.position, at_commit.position > func.coalesce(last_good.position, -1),
               AlertGroup.machine_id == machine_id, AlertGroup.status == "untriaged", AlertGroup.direction == "regression")
        .order_by(at_commit.commit_id, AlertGroup.id)
    )
    found: dict[int, list[AlertGroup]] = {}
    for commit_id, group in session.execute(statement):
        if group.id not in {g.id for g in found.setdefault(commit_id, [])}:  # a commit on two branches of a group: once
            found[commit_id].append(group)
    return found


def suspects_statement(state: str | None = None, machine_id: int | None = None, branch: str | None = None,
                       metric: str | None = None) -> Select[tuple[Suspect]]:
    """Suspected changes, newest first."""
    statement = select(Suspect).order_by(Suspect.id.desc())
    if state is not None:
        statement = statement.where(Suspect.state == state)
    if machine_id is not None:
        statement = statement.where(Suspect.machine_id == machine_id)
    if branch is not None:
        statement = statement.where(Suspect.branch_id.in_(select(Branch.id).where(Branch.name == branch)))
    if metric is not None:
        statement = statement.where(Suspect.metric == metric)
    return statement


def pending_suspects(session: Session, commit_ids: Sequence[int], machine_ids: Sequence[int] | None) -> list[Suspect]:
    """Pending suspects that name one of these commits (few at a time: filtered here, not in JSON SQL)."""
    statement = select(Suspect).where(Suspect.state == SuspectState.PENDING.value).order_by(Suspect.id)
    if machine_ids is not None:
        statement = statement.where(Suspect.machine_id.in_(list(machine_ids)))
    wanted = set(commit_ids)
    return [s for s in session.scalars(statement) if wanted & ({s.suspect_commit_id} | set(s.commit_ids))]


def active_confirm_jobs(session: Session, machine_id: int, config_id: int, commit_ids: Sequence[int]) -> int:
    statement = select(func.count()).select_from(Job).where(
        Job.machine_id == machine_id, Job.config_id == config_id, Job.commit_id.in_(list(commit_ids)),
        Job.purpose == JobPurpose.CONFIRM.value, Job.state.in_((JobState.QUEUED.value, *ACTIVE_STATES)))
    return session.scalar(statement) or 0


def active_jobs(session: Session, commit_ids: Sequence[int], machine_ids: Sequence[int] | None) -> int:
    statement = select(func.count()).select_from(Job).where(
        Job.commit_id.in_(list(commit_ids)), Job.state.in_((JobState.QUEUED.value, *ACTIVE_STATES))
    )
    if machine_ids is not None:
        statement = statement.where(Job.machine_id.in_(list(machine_ids)))
    return session.scalar(statement) or 0


def verdicts(session: Session, commit_ids: Sequence[int], machine_ids: Sequence[int] | None) -> list[tuple[CommitStatus, str]]:
    statement = (
        select(CommitStatus, Machine.name)
        .join(Machine, Machine.id == CommitStatus.machine_id)
        .where(CommitStatus.commit_id.in_(list(commit_ids)), CommitStatus.scope == StatusScope.SERIES.value)
        .order_by(CommitStatus.machine_id)
    )
    if machine_ids is not None:
        statement = statement.where(CommitStatus.machine_id.in_(list(machine_ids)))
    return [(status, name) for status, name in session.execute(statement)]


def drop_untriaged_groups_of(session: Session, branch_id: int, commit_ids: Sequence[int]) -> int:
    """Delete the branch's untriaged alert groups whose range ends or starts at one of these commits
    (commits a force push took off the branch); triaged ones stay, as history."""
    statement = delete(AlertGroup).where(
        AlertGroup.branch_id == branch_id, AlertGroup.status == AlertStatus.UNTRIAGED.value,
        AlertGroup.first_bad_commit_id.in_(list(commit_ids)) | AlertGroup.last_good_commit_id.in_(list(commit_ids)),
    ).returning(AlertGroup.id)
    return len(session.execute(statement).all())
