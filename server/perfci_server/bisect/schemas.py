from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

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
    alert_group_id: int | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
