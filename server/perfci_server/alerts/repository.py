"""SQL for alert groups, alerts and suspects, and the reads of the CI check."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from sqlalchemy import Select, and_, delete, exists, func, select
from sqlalchemy.orm import Session, aliased

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
    Job,
    JobPurpose,
    JobState,
    Machine,
    Repository,
    StatusScope,
    Suspect,
    SuspectState,
)


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


class Baseline(NamedTuple):
    measured: bool  # an earlier commit of one of its branches is measured on the machine
    waiting_for: str | None  # else: the sha of the nearest earlier commit with a job under way


def baselines(session: Session, commit_ids: Sequence[int], machine_id: int) -> dict[int, Baseline]:
    """Per commit (on at least one branch): whether it has a measured baseline on the machine, or
    one being measured. Both lookups walk back from the commit's position on each branch it is on
    (the (branch, position) key), and stop at the first match."""
    here, earlier = aliased(BranchCommit), aliased(BranchCommit)
    before_it = and_(earlier.branch_id == here.branch_id, earlier.position < here.position)
    on_machine = and_(Job.commit_id == earlier.commit_id, Job.machine_id == machine_id)
    measured = exists().where(before_it, on_machine, Job.state == JobState.DONE.value)
    waiting = (
        select(Commit.sha).select_from(earlier).join(Job, on_machine).join(Commit, Commit.id == earlier.commit_id)
        .where(before_it, Job.state.in_((JobState.QUEUED.value, *ACTIVE_STATES)))
        .order_by(earlier.position.desc()).limit(1).correlate(here).scalar_subquery()
    )
    out: dict[int, Baseline] = {}
    rows = session.execute(select(here.commit_id, measured.correlate(here), waiting).where(here.commit_id.in_(list(commit_ids))))
    for commit_id, is_measured, waiting_sha in rows:
        seen = out.get(commit_id)
        if seen is None or (is_measured and not seen.measured) or (not seen.measured and not seen.waiting_for):
            out[commit_id] = Baseline(bool(is_measured), waiting_sha)
    return out
