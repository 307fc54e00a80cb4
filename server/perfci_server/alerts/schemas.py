from __future__ import annotations

import math
from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..bounded import DbId
from ..models import AlertStatus


class CommitRef(BaseModel):
    sha: str
    position: int | None = Field(description="The commit's position on the alert's branch")
    subject: str = Field(description="First line of the commit message")
    author: str = ""


class AlertRead(BaseModel):
    config: str
    metric: str
    backend: str
    direction: str
    before_median: float
    after_median: float
    change_pct: float | None = Field(description="(after - before) / |before| x 100; null when before is 0")
    confidence: float = Field(description="1 - p of the boundary's test (1 for the exact rule): orders alerts by "
                                          "strength; not the probability that the change is real (the test ran on the "
                                          "data that chose the boundary)")
    p_value: float | None
    last_good_sha: str | None
    first_bad_sha: str
    sim_family: str | None = Field(None, description="sim: the store-buffer model the alerted results were measured with "
                                                      "(a local bisect measures on the same one); null on other backends")

    @field_validator("change_pct", "p_value", mode="before")
    @classmethod
    def _finite_or_null(cls, value: Any) -> Any:
        return value if value is None or math.isfinite(value) else None


class AlertGroupRead(BaseModel):
    id: int
    repository_id: int
    repository: str
    branch: str
    machine_id: int
    machine: str
    direction: str
    status: str
    last_good: CommitRef | None = Field(description="Last commit at the old level; null at the series start")
    first_bad: CommitRef
    summary: str
    explanation: dict[str, Any]
    triage_note: str
    triaged_by: str
    triaged_at: datetime | None
    created_at: datetime
    updated_at: datetime
    alerts: list[AlertRead]
    origin_sha: str | None = Field(None, description="A later sighting: the commit that carries this change first (a merge's "
                                                     "merged-in parent, the original of a cherry-pick or rebase)")
    origin_group_id: int | None = Field(None, description="That commit's own alert group, when it has one")
    awaiting_sha: str | None = Field(None, description="A merged-in parent being measured: whose change this is is not "
                                                       "known until it is")


class SuspectRead(BaseModel):
    """A suspected change: pending while its confirmation rounds run, never an alert."""

    id: int
    state: str = Field(description="pending: confirmation rounds queued or running; exhausted: undecided, the "
                                   "budget or the rounds are spent; confirmed: detection now reports it (see the "
                                   "alert); rejected: the extra repetitions showed no change")
    why: str = Field(description="unconfirmed: the statistics can neither confirm nor reject it yet; "
                                 "unpinned: a confirmed change the repetitions cannot pin to one commit")
    direction: str = Field(description="regression / improvement the data leans to (change: unknown direction)")
    branch: str
    machine_id: int
    machine: str
    config: str
    metric: str
    backend: str
    change_pct: float | None
    p_value: float | None
    suspect: CommitRef = Field(description="The most likely first commit at the new level")
    commits: list[str] = Field(description="Commits whose extra repetitions decide it (shas, series order)")
    confirm_jobs: int = Field(description="Confirmation jobs of its commits still queued or running")
    reason: str
    created_at: datetime
    updated_at: datetime

    @field_validator("change_pct", "p_value", mode="before")
    @classmethod
    def _finite_or_null(cls, value: Any) -> Any:
        return value if value is None or math.isfinite(value) else None


class CreepRead(BaseModel):
    """A level that moved gradually over a range of commits, no single commit to blame: not an
    alert, and no commit's status fails for it."""

    id: int
    direction: str = Field(description="regression / improvement (change: a metric of unknown direction)")
    branch: str
    machine_id: int
    machine: str
    config: str
    metric: str
    backend: str
    change_pct: float = Field(description="The whole move from its first commit to its last, in percent")
    p_value: float = Field(description="The trend test over its commits (any steps on top taken out)")
    first: CommitRef = Field(description="The first commit of the ramp")
    last: CommitRef = Field(description="The last commit of the ramp")
    commits: int | None = Field(description="Commits from the first to the last (positions on the branch)")
    created_at: datetime = Field(description="When detection first saw it")
    updated_at: datetime


class TriageStatus(str, Enum):
    UNTRIAGED = AlertStatus.UNTRIAGED.value
    ACKNOWLEDGED = AlertStatus.ACKNOWLEDGED.value
    INVALID = AlertStatus.INVALID.value
    FIXED = AlertStatus.FIXED.value


class Triage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: TriageStatus
    note: str = Field("", max_length=10_000)
    by: str = Field(min_length=1, max_length=128, description="Who triaged (a name or handle)")


class Redetect(BaseModel):
    model_config = ConfigDict(extra="forbid")

    repository_id: DbId
    branch: str = Field(min_length=1, max_length=255)
    machine_id: DbId


class RedetectAccepted(BaseModel):
    configs: int = Field(description="Benchmark configs whose series will be re-examined")


class CheckState(str, Enum):
    REGRESSED = "regressed"
    CLEAN = "clean"
    PENDING = "pending"


class MachineVerdict(BaseModel):
    machine_id: int
    machine: str
    state: str = Field(description="success / failure / pending / neutral (no baseline), as posted to the forge")
    description: str


class CheckResult(BaseModel):
    commit: str
    state: CheckState = Field(description="regressed: an untriaged regression implicates the commit; "
                                          "clean: measured and analysed everywhere, nothing untriaged; "
                                          "pending: not (fully) measured or analysed yet, or a suspected "
                                          "change of the commit is being confirmed")
    exit_code: int = Field(description="What `perfci check` exits with: 1 regressed, 0 clean, 2 pending")
    detail: str
    machines: list[MachineVerdict] = Field(description="Analysed verdicts per machine")
    pending_jobs: int = Field(description="Jobs of this commit still queued or running")
    regressions: list[AlertGroupRead]
    pending_suspects: list[SuspectRead] = Field(default_factory=list,
                                                description="Suspected changes of the commit still being confirmed")
