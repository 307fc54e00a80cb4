from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ..bounded import DbId

Sha = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}$")]


class BisectCreate(BaseModel):
    """A search between two commits of a branch, measured by one machine's agents."""

    model_config = ConfigDict(extra="forbid")

    repository: Annotated[str, StringConstraints(min_length=1, max_length=255)] | None = None
    repository_id: DbId | None = None
    branch: Annotated[str, StringConstraints(min_length=1, max_length=255)] = "main"
    good: Sha
    bad: Sha
    machine: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None
    machine_id: DbId | None = None
    config: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    metric: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    backend: Annotated[str, StringConstraints(pattern=r"^(auto|pmu|sim|tsc)$")] = "auto"
    direction: Literal["any", "regression", "improvement"] | None = Field(
        None, description="what to hunt; default: the alert group's direction with alert_group_id, else any")
    alert_group_id: DbId | None = None

    @model_validator(mode="after")
    def _one_of_each(self) -> BisectCreate:
        if (self.repository is None) == (self.repository_id is None):
            raise ValueError("give exactly one of repository (name) and repository_id")
        if (self.machine is None) == (self.machine_id is None):
            raise ValueError("give exactly one of machine (name) and machine_id")
        return self


class CommitRef(BaseModel):
    sha: str
    index: int
    author: str = ""
    subject: str = ""


class OpposingMove(BaseModel):
    """A move against the hunted kind seen during the search, and its own search's result."""

    kind: str
    change_pct: float | None
    p_value: float | None
    exact: bool
    seen: str = Field(description="the phase that saw it: endpoints, scan or search")
    good: CommitRef = Field(description="the move was seen between these two commits")
    bad: CommitRef
    status: str | None = Field(None, description="its own search's status (null: not searched)")
    message: str | None = None
    parent: CommitRef | None = None
    culprit: CommitRef | None = None
    skipped: list[str] = []
    change: dict[str, Any] | None = None
    isolated: bool = Field(description="its commit is known (its own search, or an isolated move inside its range)")
    dismissed: bool = Field(description="its search did not see it again: not counted")


class BisectRead(BaseModel):
    id: int
    status: str
    message: str
    repository_id: int
    repository: str
    branch: str
    machine_id: int
    machine: str
    config: str
    metric: str
    backend: str
    good: str
    bad: str
    range_length: int
    expected_builds: int = Field(description="ceil(log2 range_length) + 2: the search's usual bound")
    builds: int = Field(description="commits this bisect scheduled jobs for")
    reused: int = Field(description="commits whose stored results the search used without a new job")
    repetitions: int
    culprit: CommitRef | None
    parent: CommitRef | None
    kind: str | None
    change: dict[str, Any] | None
    overall: dict[str, Any] | None
    skipped: list[str]
    steps: list[dict[str, Any]]
    notes: list[str]
    direction: str = Field(description="what was hunted: regression, improvement or any (the endpoints' kind)")
    opposing: list[OpposingMove] = Field(description="moves against the hunted kind seen on the way")
    alert_group_id: int | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
