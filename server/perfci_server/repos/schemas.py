from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from ..models import Forge


class RepositoryCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=255, description="GitHub full_name / GitLab path_with_namespace")
    forge: Forge
    clone_url: str = Field(min_length=1, max_length=1024)
    webhook_secret: str | None = Field(None, min_length=16, max_length=255, description="Generated when omitted")
    track_tags: bool = False


class RepositoryRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    forge: Forge
    clone_url: str
    track_tags: bool
    created_at: datetime


class RepositoryCreated(RepositoryRead):
    webhook_secret: str = Field(description="Shown once: configure it as the forge's webhook secret")


class BranchRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    head_sha: str | None


class CommitRead(BaseModel):
    sha: str
    position: int | None = Field(None, description="Order on the requested branch")
    parents: list[str]
    author_name: str
    author_email: str
    committed_at: datetime | None
    message: str
