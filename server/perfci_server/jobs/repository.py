"""SQL for jobs and runs: bulk scheduling, the atomic claim, lease renewal and the expiry sweep."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Row, Select, bindparam, case, exists, func, select, text, update
from sqlalchemy.orm import Session, joinedload

from .. import db
from ..models import (
    ACTIVE_STATES, JOB_PRIORITY, BenchConfig, Bisect, BisectStatus, BranchCommit, Commit, Job, JobPurpose, JobState, Machine, Run,
    RunStatus, utcnow,
)
from ..models.base import UTCDateTime


_JOB_KEY = ["commit_id", "machine_id", "config_id", "round"]


def insert_missing_jobs(
    session: Session, commit_ids: Sequence[int], machine_ids: Sequence[int], config_ids: Sequence[int], max_attempts: int,
    purpose: JobPurpose = JobPurpose.PUSH, reason: str = "",
) -> int:
    """One queued job (round 0) per commit x machine x config that has none yet; returns how many
    were added. A commit's own measurement is one job whatever asked for it first (a push or a
    bisect step); ``purpose`` only names, and ranks in the claim order, the jobs added here."""
    now = utcnow()
    rows = [
        _row(commit_id, machine_id, config_id, 0, purpose, reason, max_attempts, now)
        for commit_id in commit_ids
        for machine_id in machine_ids
        for config_id in config_ids
    ]
    if not rows:
        return 0
    added = len(db.insert_ignoring_conflicts(session, Job.__table__, rows, _JOB_KEY, returning=Job.__table__.c.id).all())
    if JOB_PRIORITY[purpose] > JOB_PRIORITY[JobPurpose.PUSH]:
        # A bisect step whose commit already waits as a push job: that job is the step; it moves up.
        session.execute(
            update(Job)
            .where(Job.commit_id.in_(list(commit_ids)), Job.machine_id.in_(list(machine_ids)), Job.config_id.in_(list(config_ids)),
                   Job.round == 0, Job.state == JobState.QUEUED.value, Job.priority < JOB_PRIORITY[purpose])
            .values(priority=JOB_PRIORITY[purpose], reason=reason, updated_at=now)
        )
    return added


def insert_confirm_jobs(session: Session, machine_id: int, config_id: int, rounds: Sequence[tuple[int, int, str]],
                        max_attempts: int) -> int:
    """Confirmation jobs: (commit id, round >= 1, reason) each; a round that exists already is kept."""
    now = utcnow()
    rows = [_row(commit_id, machine_id, config_id, round_, JobPurpose.CONFIRM, reason, max_attempts, now)
            for commit_id, round_, reason in rounds if round_ >= 1]
    if not rows:
        return 0
    result = db.insert_ignoring_conflicts(session, Job.__table__, rows, _JOB_KEY, returning=Job.__table__.c.id)
    return len(result.all())


def link_partners(session: Session, machine_id: int, config_id: int,
                  pairs: Sequence[tuple[tuple[int, int], tuple[int, int]]], repetitions: int | None = None) -> int:
    """Make each pair of jobs ((commit id, round), (commit id, round)) partners: the claim leases
    them together and one agent measures them interleaved, ``repetitions`` pairs (None: the
    config's). Only queued jobs that have no partner yet are linked (a job measured already, or
    paired already, stays as it is)."""
    if not pairs:
        return 0
    keys = {key for pair in pairs for key in pair}
    rows = session.execute(
        select(Job.id, Job.commit_id, Job.round)
        .where(Job.machine_id == machine_id, Job.config_id == config_id,
               Job.commit_id.in_(sorted({c for c, _ in keys})), Job.round.in_(sorted({r for _, r in keys})),
               Job.state == JobState.QUEUED.value, Job.partner_job_id.is_(None))
    ).all()
    ids = {(r.commit_id, r.round): r.id for r in rows}
    linked = [(ids[a], ids[b]) for a, b in pairs if a in ids and b in ids]
    if linked:
        jobs = Job.__table__  # Core: an executemany UPDATE keyed by a bound id
        session.execute(update(jobs).where(jobs.c.id == bindparam("job"))
                        .values(partner_job_id=bindparam("partner"), repetitions=repetitions),
                        [{"job": a, "partner": b} for a, b in linked] + [{"job": b, "partner": a} for a, b in linked])
    return len(linked)


def insert_pull_jobs(session: Session, pull_request_id: int, machine_id: int, config_id: int,
                     sides: Sequence[tuple[int, int, str]], max_attempts: int) -> int:
    """A pull request's jobs: (commit id, round < 0, reason) each, in rounds of their own."""
    now = utcnow()
    rows = [_row(commit_id, machine_id, config_id, round_, JobPurpose.PULL, reason, max_attempts, now, pull_request_id)
            for commit_id, round_, reason in sides]
    result = db.insert_ignoring_conflicts(session, Job.__table__, rows, _JOB_KEY, returning=Job.__table__.c.id)
    return len(result.all())


def _row(commit_id: int, machine_id: int, config_id: int, round_: int, purpose: JobPurpose, reason: str,
         max_attempts: int, now: datetime, pull_request_id: int | None = None) -> dict[str, Any]:
    return {
        "commit_id": commit_id, "machine_id": machine_id, "config_id": config_id, "round": round_,
        "purpose": purpose.value, "priority": JOB_PRIORITY[purpose], "reason": reason, "pull_request_id": pull_request_id,
        "state": JobState.QUEUED.value, "attempts": 0, "max_attempts": max_attempts, "created_at": now, "updated_at": now,
    }


def confirm_rounds(session: Session, machine_id: int, config_id: int, commit_ids: Sequence[int]) -> dict[int, int]:
    """Per commit, the highest confirmation round it has (queued, running, done or failed)."""
    if not commit_ids:
        return {}
    rows = session.execute(
        select(Job.commit_id, func.max(Job.round))
        .where(Job.machine_id == machine_id, Job.config_id == config_id, Job.commit_id.in_(list(commit_ids)), Job.round > 0)
        .group_by(Job.commit_id)
    ).all()
    return {commit_id: int(r) for commit_id, r in rows}


def repetitions_by_purpose(session: Session, machine_id: int, config_id: int, commit_ids: Sequence[int]) -> tuple[int, int]:
    """(baseline, extra) repetitions of these commits on the machine x config: round-0 jobs that
    succeeded, and confirmation jobs that succeeded or are still to run (a queued round is spent)."""
    if not commit_ids:
        return 0, 0
    reps = func.coalesce(Job.repetitions, BenchConfig.repetitions)
    baseline, extra = session.execute(
        select(func.coalesce(func.sum(case((Job.round == 0, reps), else_=0)), 0),
               func.coalesce(func.sum(case((Job.round > 0, reps), else_=0)), 0))
        .select_from(Job)
        .join(BenchConfig, BenchConfig.id == Job.config_id)
        .where(Job.machine_id == machine_id, Job.config_id == config_id, Job.commit_id.in_(list(commit_ids)),
               Job.state != JobState.FAILED.value, (Job.round > 0) | (Job.state == JobState.DONE.value))
    ).one()
    return int(baseline), int(extra)


# The claim, written once as SQL text: the pick of the next job (queued job of the machine with
# the highest priority, then the oldest: bisect steps and confirmation rounds before push jobs;
# enabled machine, a backend the agent offers) and the columns ClaimedJob is built from. The
# ORDER BY is ix_jobs_claim's order, so the pick is one index scan that stops at the first match.
# A picked job with a queued partner (alerts.confirm's interleaved pair) is leased together with
# it: one agent measures both in one session, and each attempt's run names the other job.
_PICK_NEXT_JOB = """
    SELECT j.id, j.partner_job_id FROM jobs AS j
    JOIN bench_configs AS c ON c.id = j.config_id
    JOIN machines AS m ON m.id = j.machine_id
    WHERE j.machine_id = :machine_id AND j.state = 'queued' AND m.enabled AND c.backend IN :backends
      AND NOT (j.partner_job_id < j.id AND EXISTS (SELECT 1 FROM jobs AS q WHERE q.id = j.partner_job_id AND q.state = 'queued'))
    ORDER BY j.priority DESC, j.id LIMIT 1"""
# A pair's second job is picked only through its first while that one is queued: a claimer that
# skips the first (another claim holds its lock) must not take the second alone and split the pair.
_LEASE = "state = 'leased', attempts = jobs.attempts + 1, agent_id = :agent_id, lease_expires_at = :lease_until, updated_at = :now"
_CLAIMED_COLUMNS = """
    SELECT claimed.id AS job_id, claimed.attempts AS attempt, r.name AS repository, r.clone_url,
           COALESCE(claimed.repetitions, c.repetitions) AS job_repetitions,
           cm.sha AS commit_sha, c.id, c.name, c.harness, c.pkt_size, c.flows, c.routes, c.packets,
           c.warmup, c.lcores, c.scaling, c.backend, c.repetitions, c.enabled, c.created_at
    FROM claimed
    JOIN commits AS cm ON cm.id = claimed.commit_id
    JOIN repositories AS r ON r.id = cm.repository_id
    JOIN bench_configs AS c ON c.id = claimed.config_id
    ORDER BY claimed.id = :picked DESC"""
# Typed binds: SQLite stores datetimes as text, in the format of the column type.
_BACKENDS = bindparam("backends", expanding=True)
_NOW, _LEASE_UNTIL = bindparam("now", type_=UTCDateTime()), bindparam("lease_until", type_=UTCDateTime())

# PostgreSQL: the whole claim in one statement and one round trip. The pick (and its partner) take
# FOR UPDATE SKIP LOCKED, so concurrent claimers each lock different rows instead of queueing on
# the same one; the leases, the runs of the attempts and the agent's last-seen time are written by
# the same statement. A partner another claim holds is skipped: the pick is then measured alone
# (only when the partner was leased already, a retry: see _PICK_NEXT_JOB).
_CLAIM_POSTGRESQL = text(f"""
WITH picked AS ({_PICK_NEXT_JOB} FOR UPDATE OF j SKIP LOCKED),
partner AS (
    SELECT p.id FROM jobs AS p JOIN picked ON p.id = picked.partner_job_id WHERE p.state = 'queued'
    FOR UPDATE OF p SKIP LOCKED
),
both_ids AS (SELECT id FROM picked UNION ALL SELECT id FROM partner),
claimed AS (
    UPDATE jobs SET {_LEASE} FROM both_ids WHERE jobs.id = both_ids.id AND jobs.state = 'queued'
    RETURNING jobs.id, jobs.attempts, jobs.commit_id, jobs.config_id, jobs.repetitions,
              CASE WHEN jobs.id IN (SELECT id FROM picked) THEN (SELECT id FROM partner)
                   ELSE (SELECT id FROM picked) END AS paired_with
),
new_run AS (
    INSERT INTO runs (job_id, attempt, agent_id, status, backend_reason, created_at, paired_with)
    SELECT id, attempts, :agent_id, 'running', '', :now, paired_with FROM claimed
),
seen AS (UPDATE agents SET last_seen_at = :now WHERE id = :agent_id)
{_CLAIMED_COLUMNS.replace(":picked", "(SELECT id FROM picked)")}""").bindparams(_BACKENDS, _NOW, _LEASE_UNTIL)

# SQLite renders no row locks and no data-modifying CTEs, but runs one writer at a time and each
# statement is atomic; the state = 'queued' re-checks keep the UPDATEs correct either way.
_CLAIM_SQLITE_STEPS = (
    text("UPDATE agents SET last_seen_at = :now WHERE id = :agent_id").bindparams(_NOW),
    text(f"UPDATE jobs SET {_LEASE} WHERE jobs.id = (SELECT id FROM ({_PICK_NEXT_JOB})) AND jobs.state = 'queued' "
         "RETURNING id, attempts, partner_job_id").bindparams(_BACKENDS, _NOW, _LEASE_UNTIL),
    text(f"UPDATE jobs SET {_LEASE} WHERE jobs.id = :partner AND jobs.state = 'queued' AND jobs.machine_id = :machine_id "
         "RETURNING id, attempts").bindparams(_NOW, _LEASE_UNTIL),
    text("INSERT INTO runs (job_id, attempt, agent_id, status, backend_reason, created_at, paired_with) "
         "VALUES (:job_id, :attempt, :agent_id, 'running', '', :now, :paired_with)").bindparams(_NOW),
    text(f"WITH claimed AS (SELECT id, attempts, commit_id, config_id, repetitions FROM jobs WHERE id IN (:picked, :partner)) "
         f"{_CLAIMED_COLUMNS}"),
)


def claim_next(
    session: Session, machine_id: int, agent_id: int, backends: Sequence[str], now: datetime, lease_until: datetime
) -> list[Row[Any]]:
    """Lease the next queued job of this machine (highest priority, then oldest) whose backend the agent offers, and its
    partner when that one is queued too; create the run of each attempt and note the agent as seen. [] when no job is
    waiting (or the machine is disabled). The rows, the picked job first (then its partner, when leased with it):
    job_id, attempt, repository, clone_url, commit_sha and the config's columns.

    Core/text statements only: the ORM would also try to synchronise a session that holds no jobs,
    at several times the cost of the statements themselves.
    """
    params: dict[str, Any] = {
        "machine_id": machine_id, "agent_id": agent_id, "backends": ["auto", *backends], "now": now, "lease_until": lease_until,
    }
    if db.is_postgresql(session):
        return list(session.execute(_CLAIM_POSTGRESQL, params).all())
    seen, lease, lease_partner, add_run, context = _CLAIM_SQLITE_STEPS
    session.execute(seen, params)
    leased = session.execute(lease, params).first()
    if leased is None:
        return []
    partner = None
    if leased.partner_job_id is not None:
        partner = session.execute(lease_partner, {**params, "partner": leased.partner_job_id}).first()
    for job, other in ((leased, partner), (partner, leased)):
        if job is not None:
            session.execute(add_run, {**params, "job_id": job.id, "attempt": job.attempts,
                                      "paired_with": other.id if (other is not None and partner is not None) else None})
    params.update(picked=leased.id, partner=partner.id if partner is not None else -1)
    return list(session.execute(context, params).all())


def job_with_context(session: Session, job_id: int) -> Job | None:
    """The job with its commit, machine and config loaded (relationships never lazy-load)."""
    statement = (
        select(Job)
        .options(joinedload(Job.commit), joinedload(Job.machine), joinedload(Job.config))
        .where(Job.id == job_id)
    )
    return session.scalar(statement)


def lock_job(session: Session, job_id: int) -> Job | None:
    """The job row, locked for the rest of the transaction (serialises upload/failure against the sweep)."""
    return session.scalar(select(Job).where(Job.id == job_id).with_for_update())


_jobs, _runs, _commits, _configs, _machines, _bisects = (
    Job.__table__, Run.__table__, Commit.__table__, BenchConfig.__table__, Machine.__table__, Bisect.__table__
)
# Whether a bisect waits on results of this job's machine x config (the upload then advances it).
_BISECT_RUNNING = exists().where(
    _bisects.c.status == BisectStatus.RUNNING.value,
    _bisects.c.machine_id == _jobs.c.machine_id,
    _bisects.c.config_id == _jobs.c.config_id,
)
# Built once (Core, no ORM entities to load): the job with what an upload is checked against.
_LOCK_JOB_FOR_RESULT = (
    select(
        _jobs.c.id.label("job_id"), _jobs.c.machine_id, _jobs.c.commit_id, _jobs.c.config_id, _jobs.c.state,
        _jobs.c.attempts, _jobs.c.max_attempts, _jobs.c.agent_id, _jobs.c.pull_request_id,
        _runs.c.id.label("run_id"), _runs.c.status.label("run_status"), _runs.c.document_sha256,
        _commits.c.sha.label("commit_sha"), _machines.c.fingerprint, _BISECT_RUNNING.label("bisect_running"),
        *(column for column in _configs.c),
    )
    .join(_commits, _commits.c.id == _jobs.c.commit_id)
    .join(_configs, _configs.c.id == _jobs.c.config_id)
    .join(_machines, _machines.c.id == _jobs.c.machine_id)
    .outerjoin(_runs, (_runs.c.job_id == _jobs.c.id) & (_runs.c.attempt == bindparam("attempt")))
    .where(_jobs.c.id == bindparam("job_id"))
    .with_for_update(of=_jobs)
)


def lock_job_for_result(session: Session, job_id: int, attempt: int) -> Row[Any] | None:
    """As :func:`lock_job` (only the job row is locked), in one round trip: the job's columns
    (``job_id``, ``machine_id``, ``state``, ``attempts``, ...), the run of ``attempt`` (``run_id``,
    ``run_status``, ``document_sha256``; None without one), ``commit_sha``, the machine's
    ``fingerprint``, ``bisect_running`` (a bisect of the machine x config is running) and the
    config's columns under their own names."""
    return session.execute(_LOCK_JOB_FOR_RESULT, {"job_id": job_id, "attempt": attempt}).first()


def renew_lease(session: Session, job_id: int, attempt: int, agent_id: int, until: datetime) -> bool:
    statement = (
        update(Job)
        .where(Job.id == job_id, Job.attempts == attempt, Job.agent_id == agent_id, Job.state.in_(ACTIVE_STATES))
        .values(lease_expires_at=until, state=JobState.RUNNING.value, updated_at=utcnow())
        .returning(Job.id)
    )
    return session.execute(statement).first() is not None


def run_for_attempt(session: Session, job_id: int, attempt: int) -> Run | None:
    return session.scalar(select(Run).where(Run.job_id == job_id, Run.attempt == attempt))


def expire_leases(session: Session, now: datetime) -> tuple[list[int], list[int]]:
    """Requeue active jobs whose lease ran out, or fail them when no attempts are left.

    Returns (requeued ids, failed ids). Rows locked by an in-flight upload are skipped: that
    upload either completes the job or finds it requeued on the next sweep.
    """
    expired = session.execute(
        select(Job.id, Job.attempts, Job.max_attempts)
        .where(Job.state.in_(ACTIVE_STATES), Job.lease_expires_at < now)
        .order_by(Job.id)
        .with_for_update(skip_locked=True)
    ).all()
    if not expired:
        return [], []
    ids = [row.id for row in expired]
    session.execute(
        update(Run)
        .where(Run.job_id.in_(ids), Run.status == RunStatus.RUNNING.value)
        .values(status=RunStatus.EXPIRED.value, reason="lease expired before a result arrived", finished_at=now)
    )
    session.execute(
        update(Job)
        .where(Job.id.in_(ids))
        .values(
            state=case((Job.attempts >= Job.max_attempts, JobState.FAILED.value), else_=JobState.QUEUED.value),
            agent_id=None,
            lease_expires_at=None,
            updated_at=now,
        )
    )
    failed = [row.id for row in expired if row.attempts >= row.max_attempts]
    requeued = [row.id for row in expired if row.attempts < row.max_attempts]
    return requeued, failed


def jobs_statement(
    state: str | None = None, machine_id: int | None = None, config_id: int | None = None, commit_id: int | None = None
) -> Select[tuple[Job]]:
    statement = select(Job).options(joinedload(Job.commit), joinedload(Job.config)).order_by(Job.id.desc())
    if state is not None:
        statement = statement.where(Job.state == state)
    if machine_id is not None:
        statement = statement.where(Job.machine_id == machine_id)
    if config_id is not None:
        statement = statement.where(Job.config_id == config_id)
    if commit_id is not None:
        statement = statement.where(Job.commit_id == commit_id)
    return statement


def runs_of(session: Session, job_id: int) -> list[Run]:
    return list(session.scalars(select(Run).where(Run.job_id == job_id).order_by(Run.attempt)))


def newest_commits_of_branches(session: Session, per_branch: int) -> list[int]:
    """The newest ``per_branch`` commits of every tracked branch, each branch oldest first (a
    commit on several branches once, where it first appears)."""
    ranked = select(BranchCommit.branch_id, BranchCommit.commit_id, BranchCommit.position,
                    func.row_number().over(partition_by=BranchCommit.branch_id, order_by=BranchCommit.position.desc()).label("k")
                    ).subquery()
    statement = select(ranked.c.commit_id).where(ranked.c.k <= per_branch).order_by(ranked.c.branch_id, ranked.c.position)
    return list(dict.fromkeys(session.scalars(statement)))


def queued_own_jobs(session: Session, commit_ids: Sequence[int], machine_ids: Sequence[int]) -> dict[int, list[int]]:
    """Machine id -> the commits (of these) with their own measurement (round 0) queued there."""
    if not commit_ids or not machine_ids:
        return {}
    statement = (
        select(Job.machine_id, Job.commit_id).distinct()
        .where(Job.commit_id.in_(list(commit_ids)), Job.machine_id.in_(list(machine_ids)), Job.round == 0,
               Job.state == JobState.QUEUED.value)
    )
    out: dict[int, list[int]] = {}
    for machine_id, commit_id in session.execute(statement):
        out.setdefault(machine_id, []).append(commit_id)
    return out
