"""SQL for alert groups, alerts and suspects, and the reads of the CI check."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from sqlalchemy import Select, and_, delete, exists, func, or_, select, tuple_
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
    Creep,
    Job,
    JobPurpose,
    JobState,
    Machine,
    MetricValue,
    Repository,
    Run,
    RunStatus,
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
    sightings: bool = False,
) -> Select[tuple[AlertGroup]]:
    """Alert groups, newest first; config/metric keep groups with at least one such alert; later
    sightings of a change another commit carries first only with ``sightings``."""
    statement = select(AlertGroup).order_by(AlertGroup.id.desc())
    if not sightings:
        statement = statement.where(AlertGroup.origin_commit_id.is_(None))
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
    statement = _of_series(select(Suspect).order_by(Suspect.id.desc()), Suspect, machine_id, branch, metric)
    return statement if state is None else statement.where(Suspect.state == state)


def creeps_statement(machine_id: int | None = None, branch: str | None = None, metric: str | None = None) -> Select[tuple[Creep]]:
    """Creeps, newest first."""
    return _of_series(select(Creep).order_by(Creep.id.desc()), Creep, machine_id, branch, metric)


def _of_series(statement: Select[Any], model: type[Suspect] | type[Creep], machine_id: int | None, branch: str | None,
               metric: str | None) -> Select[Any]:
    """``statement`` narrowed to the findings of one machine, branch (by name) and metric, each when given."""
    if machine_id is not None:
        statement = statement.where(model.machine_id == machine_id)
    if branch is not None:
        statement = statement.where(model.branch_id.in_(select(Branch.id).where(Branch.name == branch)))
    if metric is not None:
        statement = statement.where(model.metric == metric)
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


def untriaged_groups_of(session: Session, branch_id: int, commit_ids: Sequence[int]) -> list[int]:
    """Ids of the groups :func:`drop_untriaged_groups_of` deletes."""
    statement = select(AlertGroup.id).where(
        AlertGroup.branch_id == branch_id, AlertGroup.status == AlertStatus.UNTRIAGED.value,
        AlertGroup.first_bad_commit_id.in_(list(commit_ids)) | AlertGroup.last_good_commit_id.in_(list(commit_ids)),
    )
    return list(session.scalars(statement))


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


class OwnMeasurement(NamedTuple):
    """A commit's own series jobs on a machine (round 0, every config)."""

    active: int  # queued, leased or running, or measured and not yet analysed by detection
    done: int
    failed: int
    failure: str  # why the last failed one failed ("" when none did)


def own_measurements(session: Session, commit_ids: Sequence[int], machine_id: int) -> dict[int, OwnMeasurement]:
    """Per commit that has its own jobs on the machine: how far they are."""
    rows = session.execute(
        select(Job.commit_id, Job.state, func.count(), func.max(Run.status))
        .outerjoin(Run, and_(Run.job_id == Job.id, Run.attempt == Job.attempts))
        .where(Job.commit_id.in_(list(commit_ids)), Job.machine_id == machine_id, Job.round == 0)
        .group_by(Job.commit_id, Job.state)
    )
    counts: dict[int, dict[str, int]] = {}
    failure: dict[int, str] = {}
    for commit_id, state, n, status in rows:
        counts.setdefault(commit_id, {})[state] = n
        if state == JobState.FAILED.value:
            failure[commit_id] = "it did not build" if status == RunStatus.BUILD_FAILED.value else f"its run ended {status or 'without a result'}"
    undetected = select(Job.commit_id).distinct().join(Run, Run.job_id == Job.id).where(
        Job.commit_id.in_(list(commit_ids)), Job.machine_id == machine_id, Job.round == 0, Run.status == RunStatus.OK.value,
        Run.detected_at.is_(None))
    for commit_id in session.scalars(undetected):  # measured, not yet analysed: detection decides it next
        counts.setdefault(commit_id, {})["analysing"] = 1
    active = (JobState.QUEUED.value, *ACTIVE_STATES, "analysing")
    return {c: OwnMeasurement(sum(n for s, n in by.items() if s in active), by.get(JobState.DONE.value, 0),
                              by.get(JobState.FAILED.value, 0), failure.get(c, ""))
            for c, by in counts.items()}


def pending_series_commits(session: Session, machine_id: int, branch_ids: Iterable[int], no_baseline: str = "") -> list[int]:
    """Commits of these branches whose series verdict on the machine is pending, or neutral for
    want of a baseline (its description starts with ``no_baseline``: an earlier commit may have
    been placed before it since, by pushes completed out of order), since what they wait for may
    have been measured since; and whose own runs detection has seen."""
    waiting = CommitStatus.state == "pending"
    if no_baseline:
        waiting = or_(waiting, and_(CommitStatus.state == "neutral", CommitStatus.description.startswith(no_baseline, autoescape=True)))
    ids = list(branch_ids)
    if not ids:
        return []
    waiting_ids = set(session.scalars(
        select(CommitStatus.commit_id).distinct()
        .join(BranchCommit, BranchCommit.commit_id == CommitStatus.commit_id)
        .where(CommitStatus.machine_id == machine_id, CommitStatus.scope == StatusScope.SERIES.value,
               waiting, BranchCommit.branch_id.in_(ids))
    ))
    if not waiting_ids:
        return []
    # A commit whose own run detection has not seen yet is decided when it does. Asked apart, over the
    # few waiting commits: as a NOT EXISTS in one statement, PostgreSQL can pick a plan that runs for
    # minutes on a 300-commit series.
    undetected = set(session.scalars(
        select(Job.commit_id).distinct().join(Run, Run.job_id == Job.id)
        .where(Job.commit_id.in_(waiting_ids), Job.machine_id == machine_id, Run.status == RunStatus.OK.value,
               Run.detected_at.is_(None))
    ))
    return sorted(waiting_ids - undetected)


# --- whose change it is (origins.py) ------------------------------------------------------------


def commits_with_shas(session: Session, repository_id: int, shas: Sequence[str]) -> list[Commit]:
    """The repository's commits with these shas, in the order given (unknown ones left out)."""
    found = {c.sha: c for c in session.scalars(select(Commit).where(Commit.repository_id == repository_id,
                                                                     Commit.sha.in_(list(shas))))}
    return [found[sha] for sha in shas if sha in found]


def own_values(session: Session, commit_id: int, machine_id: int, config_id: int) -> dict[tuple[str, str], list[float]]:
    """(metric, backend) -> the repetitions of the commit's own measurement (round 0) on machine x config."""
    statement = (
        select(MetricValue.metric, MetricValue.backend, MetricValue.rep_values)
        .join(Run, Run.id == MetricValue.run_id)
        .join(Job, Job.id == Run.job_id)
        .where(Job.commit_id == commit_id, Job.machine_id == machine_id, Job.config_id == config_id, Job.round == 0,
               Run.status == RunStatus.OK.value)
    )
    out: dict[tuple[str, str], list[float]] = {}
    for metric, backend, values in session.execute(statement):
        out.setdefault((metric, backend), []).extend(v for v in values if v is not None)
    return {k: v for k, v in out.items() if v}


def _own(statement: Select[Any]) -> Select[Any]:
    """Groups that are their own change (not a sighting, not waiting to be told)."""
    return statement.where(AlertGroup.origin_commit_id.is_(None), AlertGroup.awaiting_commit_id.is_(None))


def group_carried_by(session: Session, group: AlertGroup, commit_id: int, keys: set[tuple[int, str, str]]) -> int | None:
    """The nearest group of the machine, on a branch the commit is on, at or before it, in the same
    direction with one of these series: the change the commit carries."""
    here, first_bad = aliased(BranchCommit), aliased(BranchCommit)
    statement = _own(
        select(AlertGroup.id, first_bad.position)
        .join(here, and_(here.branch_id == AlertGroup.branch_id, here.commit_id == commit_id))
        .join(first_bad, and_(first_bad.branch_id == AlertGroup.branch_id, first_bad.commit_id == AlertGroup.first_bad_commit_id))
        .where(AlertGroup.machine_id == group.machine_id, AlertGroup.direction == group.direction, AlertGroup.id != group.id,
               first_bad.position <= here.position,
               exists().where(Alert.group_id == AlertGroup.id,
                              tuple_(Alert.config_id, Alert.metric, Alert.backend).in_(sorted(keys))))
        .order_by(first_bad.position.desc(), AlertGroup.id)
        .limit(1)
    )
    row = session.execute(statement).first()
    return row[0] if row else None


def group_of_copy(session: Session, group: AlertGroup, commit: Commit) -> AlertGroup | None:
    """The oldest group of the machine, in the same direction, about another commit with the same
    patch id that is still on the group's branch: the change this commit copies."""
    original = aliased(Commit)
    statement = _own(
        select(AlertGroup)
        .join(original, original.id == AlertGroup.first_bad_commit_id)
        .join(BranchCommit, and_(BranchCommit.branch_id == AlertGroup.branch_id, BranchCommit.commit_id == original.id))
        .where(original.repository_id == commit.repository_id, original.patch_id == commit.patch_id, original.id != commit.id,
               AlertGroup.machine_id == group.machine_id, AlertGroup.direction == group.direction, AlertGroup.id != group.id)
        .order_by(AlertGroup.id)
        .limit(1)
    )
    return session.scalar(statement)


def group_of_same_commit(session: Session, group: AlertGroup) -> AlertGroup | None:
    """The oldest other group of the machine, in the same direction, whose first bad commit is this
    group's on another branch (a branch rebased onto it, or carrying it in its inherited history)."""
    statement = _own(
        select(AlertGroup)
        .where(AlertGroup.first_bad_commit_id == group.first_bad_commit_id, AlertGroup.machine_id == group.machine_id,
               AlertGroup.direction == group.direction, AlertGroup.branch_id != group.branch_id, AlertGroup.id < group.id)
        .order_by(AlertGroup.id)
        .limit(1)
    )
    return session.scalar(statement)


def groups_awaiting(session: Session, machine_id: int, commit_ids: Sequence[int]) -> list[AlertGroup]:
    if not commit_ids:
        return []
    statement = select(AlertGroup).where(AlertGroup.machine_id == machine_id, AlertGroup.awaiting_commit_id.in_(list(commit_ids)))
    return list(session.scalars(statement.order_by(AlertGroup.id)))


def sightings_of(session: Session, group_ids: Sequence[int]) -> list[AlertGroup]:
    if not group_ids:
        return []
    return list(session.scalars(select(AlertGroup).where(AlertGroup.origin_group_id.in_(list(group_ids))).order_by(AlertGroup.id)))


def range_commits(session: Session, group: AlertGroup) -> list[int]:
    """The commits of a group's range (last good, first bad] on its branch."""
    first_bad = select(BranchCommit.position).where(BranchCommit.branch_id == group.branch_id,
                                                    BranchCommit.commit_id == group.first_bad_commit_id).scalar_subquery()
    last_good = select(BranchCommit.position).where(BranchCommit.branch_id == group.branch_id,
                                                    BranchCommit.commit_id == group.last_good_commit_id).scalar_subquery()
    statement = select(BranchCommit.commit_id).where(BranchCommit.branch_id == group.branch_id,
                                                     BranchCommit.position <= first_bad,
                                                     BranchCommit.position > func.coalesce(last_good, -1))
    return list(session.scalars(statement))
