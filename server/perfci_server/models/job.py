"""Work: a job is one commit x machine x config; a run is one attempt at it."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any

from sqlalchemy import CheckConstraint, ColumnElement, ForeignKey, Index, Integer, String, Text, UniqueConstraint, case, text
from sqlalchemy.ext.hybrid import hybrid_property
from sqlalchemy.orm import Mapped, mapped_column, relationship

from .base import Base, BigId, CreatedAtMixin, IdMixin, utcnow
from .bench import BenchConfig
from .machine import Machine
from .repository import Commit


class JobState(str, Enum):
    QUEUED = "queued"
    LEASED = "leased"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class RunStatus(str, Enum):
    RUNNING = "running"
    OK = "ok"
    BUILD_FAILED = "build_failed"
    RUN_FAILED = "run_failed"
    ERROR = "error"  # the agent could not produce a result at all (clone, crash, ...)
    EXPIRED = "expired"  # the lease ran out before a result arrived


ACTIVE_STATES = (JobState.LEASED.value, JobState.RUNNING.value)


class JobPurpose(str, Enum):
    """Why a job exists; it also sets the job's place in the claim order (JOB_PRIORITY)."""

    PUSH = "push"  # a pushed commit's own measurement
    BISECT = "bisect"  # a step of a server bisect
    CONFIRM = "confirm"  # extra repetitions that decide a suspected change (alerts.confirm)
    PULL = "pull"  # a pull request's head or merge-base, measured as interleaved partners (pulls.service)
    BACKFILL = "backfill"  # history measured for a machine or config that joined late (jobs.service.backfill)


# Claimed highest first, then oldest: a bisect step or a confirmation decides an alert someone is
# waiting for. A push's status and a pull request's verdict are both awaited on the forge: first come,
# first served (a pull request's head is usually a push queued just before it, whose kept sim counts
# its session then takes). Backfilled history waits for everything else.
JOB_PRIORITY = {JobPurpose.PUSH: 0, JobPurpose.BISECT: 10, JobPurpose.CONFIRM: 10, JobPurpose.PULL: 0, JobPurpose.BACKFILL: -10}


class Job(IdMixin, CreatedAtMixin, Base):
    __tablename__ = "jobs"
    __table_args__ = (
        # Round 0 is the commit's own measurement; confirmation rounds 1, 2, ... re-measure it.
        UniqueConstraint("commit_id", "machine_id", "config_id", "round"),
        CheckConstraint("state IN ('queued', 'leased', 'running', 'done', 'failed')", name="state"),
        CheckConstraint("attempts <= max_attempts", name="attempts"),
        CheckConstraint("purpose IN ('push', 'bisect', 'confirm', 'pull', 'backfill')", name="purpose"),
        # The requeue sweep: active jobs by lease expiry.
        Index("ix_jobs_state_lease_expires_at", "state", "lease_expires_at"),
    )

    commit_id: Mapped[int] = mapped_column(BigId, ForeignKey("commits.id", ondelete="CASCADE"))
    machine_id: Mapped[int] = mapped_column(BigId, ForeignKey("machines.id", ondelete="CASCADE"))
    config_id: Mapped[int] = mapped_column(BigId, ForeignKey("bench_configs.id", ondelete="CASCADE"))
    state: Mapped[str] = mapped_column(String(16), default=JobState.QUEUED.value)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    agent_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("agents.id", ondelete="SET NULL"))
    lease_expires_at: Mapped[datetime | None]
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    purpose: Mapped[str] = mapped_column(String(16), default=JobPurpose.PUSH.value, server_default="push")
    priority: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    round: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    reason: Mapped[str] = mapped_column(Text, default="", server_default="")  # e.g. the suspect a confirm job decides
    # The job measured with this one in one interleaved session (alerts.confirm: a suspect's k - 1 and k);
    # the claim leases both to one agent when both are queued.
    partner_job_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("jobs.id", ondelete="SET NULL"))
    # Repetitions this job measures when not the config's (None): an interleaved bisect session takes the
    # pairs its paired test needs to reach alpha (bisect.service, analysis.bisect.Policy.pairs_needed).
    repetitions: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The pull request a ``pull`` job measures a side of (its head or merge-base, in a round of its own).
    pull_request_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("pull_requests.id", ondelete="SET NULL"), index=True)

    commit: Mapped[Commit] = relationship(lazy="raise")
    machine: Mapped[Machine] = relationship(lazy="raise")
    config: Mapped[BenchConfig] = relationship(lazy="raise")


# The claim query: next queued job of one machine, highest priority first, then oldest (one index
# scan in the claim's ORDER BY order, jobs_repository._PICK_NEXT_JOB).
Index("ix_jobs_claim", Job.machine_id, Job.state, Job.priority.desc(), Job.id)


class Run(IdMixin, CreatedAtMixin, Base):
    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("job_id", "attempt"),
        # A job never gets two result sets: at most one successful run per job, enforced by the database.
        Index(
            "uq_runs_job_id_ok",
            "job_id",
            unique=True,
            postgresql_where=text("status = 'ok'"),
            sqlite_where=text("status = 'ok'"),
        ),
        # Successful runs detection has not looked at yet: the detection task's work list.
        Index(
            "ix_runs_detection_pending",
            "job_id",
            postgresql_where=text("status = 'ok' AND detected_at IS NULL"),
            sqlite_where=text("status = 'ok' AND detected_at IS NULL"),
        ),
    )

    job_id: Mapped[int] = mapped_column(BigId, ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    agent_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("agents.id", ondelete="SET NULL"))
    status: Mapped[str] = mapped_column(String(16), default=RunStatus.RUNNING.value)
    reason: Mapped[str | None] = mapped_column(Text)
    log_tail: Mapped[str | None] = mapped_column(Text)
    backend: Mapped[str | None] = mapped_column(String(8))
    backend_reason: Mapped[str] = mapped_column(Text, default="")
    build_id: Mapped[str | None] = mapped_column(String(200))
    tuning: Mapped[dict[str, Any] | None]
    # The result document's notes: values it carried that were physically impossible (not stored).
    notes: Mapped[list[str] | None]
    # what the result could not measure, and why ({"energy": "no RAPL: ..."})
    unavailable: Mapped[dict[str, Any] | None]
    # The agent's noisy mark (ResultDocument.noisy): repetitions spread far beyond the usual noise.
    noisy: Mapped[dict[str, Any] | None]
    # The samples are an earlier sim measurement's (ResultDocument.reused_from) and the run it was
    # uploaded as: {"commit", "started_at", "finished_at", "run_id" (None: not uploaded here)}.
    reused_from: Mapped[dict[str, Any] | None]
    # sha256 of the canonical result document: a retried identical upload is recognised as such.
    document_sha256: Mapped[str | None] = mapped_column(String(64))
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    received_at: Mapped[datetime | None]
    # When detection analysed this (ok) run's series; NULL while it waits (alerts.detection.detect_pending).
    detected_at: Mapped[datetime | None]
    # The partner job this attempt was measured interleaved with (its repetitions pair with the
    # partner's run that names this job); NULL for an attempt measured alone.
    paired_with: Mapped[int | None] = mapped_column(BigId, ForeignKey("jobs.id", ondelete="SET NULL"))

    @hybrid_property
    def session_key(self) -> int:
        """The key of the interleaved session this attempt was part of, the same on both sides: the
        lower of its job and the partner job (0: measured alone)."""
        return 0 if self.paired_with is None else min(self.job_id, self.paired_with)

    @session_key.inplace.expression
    @classmethod
    def _session_key_expression(cls) -> ColumnElement[int]:
        return case((cls.paired_with.is_(None), 0), (cls.paired_with < cls.job_id, cls.paired_with), else_=cls.job_id)
