from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from perfci_core.result import MAX_TEXT, BenchConfig

from ..bounded import DbInt


class PartnerJob(BaseModel):
    """The other job of an interleaved pair, leased with the claimed one (same machine and config)."""

    job_id: int
    attempt: int
    commit: str


class ClaimedJob(BaseModel):
    """Everything an agent needs to build, run and report one attempt (two, with a partner)."""

    job_id: int
    attempt: int
    lease_expires_at: datetime
    lease_seconds: int
    repository: str
    clone_url: str
    commit: str
    config: BenchConfig
    backend: str = Field(description="'auto' or the backend the config requires")
    repetitions: int
    partner: PartnerJob | None = Field(
        default=None, description="leased with this job: measure both commits interleaved, A B A B ..., and upload "
                                  "each side to its own job")
    pair_seed: int | None = Field(default=None, description="seed of the pairs' order (reproducible from the job ids)")


class LeaseRenewal(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attempt: DbInt = Field(ge=1)


class LeaseRenewed(BaseModel):
    job_id: int
    attempt: int
    lease_expires_at: datetime


class FailureReport(BaseModel):
    """The agent could not produce a result document at all (clone failed, crashed, ...)."""

    model_config = ConfigDict(extra="forbid")

    reason: Annotated[str, StringConstraints(min_length=1, max_length=MAX_TEXT)]
    log_tail: Annotated[str, StringConstraints(max_length=MAX_TEXT)] | None = None


class ReleaseRequest(BaseModel):
    """The agent gives an unfinished attempt back (it is shutting down)."""

    model_config = ConfigDict(extra="forbid")

    reason: Annotated[str, StringConstraints(min_length=1, max_length=2000)]


class JobOutcome(BaseModel):
    job_id: int
    attempt: int
    job_state: str
    run_status: str


class ReusedFromRead(BaseModel):
    """The earlier sim measurement a run's samples are (the agent did not simulate again)."""

    commit: str
    started_at: datetime
    finished_at: datetime
    run_id: int | None = Field(description="The run that measurement was uploaded as; null when this server has none")


class RunRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    attempt: int
    agent_id: int | None
    status: str
    reason: str | None
    backend: str | None
    build_id: str | None
    started_at: datetime | None
    finished_at: datetime | None
    received_at: datetime | None
    created_at: datetime
    notes: list[str] | None = None  # impossible values the result carried (not stored)
    paired_with: int | None = None  # the partner job this attempt was measured interleaved with
    reused_from: ReusedFromRead | None = None  # sim counts reused, not simulated again


class JobRead(BaseModel):
    id: int
    commit: str
    repository_id: int
    machine_id: int
    config: str
    state: str
    attempts: int
    max_attempts: int
    agent_id: int | None
    lease_expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    purpose: str = "push"
    round: int = 0
    reason: str = ""
    partner_job_id: int | None = None


class JobDetail(JobRead):
    runs: list[RunRead]
