"""Payload parts every forge's deliveries share: a commit sha and a listed commit."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from .events import PushedCommit

Sha = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}$")]


class Author(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str = ""
    email: str = ""


class ForgeCommit(BaseModel):
    """A commit as a push payload lists it (every forge of the registry uses these fields)."""

    model_config = ConfigDict(extra="ignore")

    id: Sha
    message: str = ""
    timestamp: datetime | None = None
    author: Author = Field(default_factory=Author)

    def pushed(self) -> PushedCommit:
        return PushedCommit(self.id, self.message, self.author.name, self.author.email, self.timestamp)
