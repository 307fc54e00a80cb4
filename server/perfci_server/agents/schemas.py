from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from perfci_core.metrics import Backend
from perfci_core.result import MachineValue

from ..machines.schemas import MachineRead

Fingerprint = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
ShortText = Annotated[str, StringConstraints(max_length=128)]


class EnrollmentTokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str = Field("", max_length=255)
    ttl_seconds: int | None = Field(None, ge=60, le=30 * 24 * 3600)


class EnrollmentTokenIssued(BaseModel):
    token: str = Field(description="Single use; give it to `perfci agent enroll`")
    expires_at: datetime


class EnrollRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enrollment_token: str = Field(min_length=1, max_length=200)
    name: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    machine_id: Fingerprint = Field(description="The result document's machine_id (fingerprint hash)")
    machine: dict[ShortText, MachineValue] = Field(max_length=100)
    machine_name: ShortText | None = None
    backends: list[Backend] = Field(default_factory=list, max_length=3)
    version: ShortText = ""


class Enrolled(BaseModel):
    agent_id: int
    machine_id: int
    token: str = Field(description="The agent's bearer token; shown once, stored hashed")


class HeartbeatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backends: list[Backend] | None = Field(None, max_length=3)
    version: ShortText | None = None
    # Why the agent does not claim jobs (null: it claims); an agent that does not send it leaves it as it was.
    stopped_claiming: Annotated[str, StringConstraints(max_length=2000)] | None = None


class HeartbeatResponse(BaseModel):
    agent_id: int
    server_time: datetime


class AgentRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    machine: MachineRead
    backends: list[str]
    version: str
    last_seen_at: datetime | None
    revoked_at: datetime | None
    stopped_claiming: str | None = Field(None, description="Why the agent stopped claiming jobs (its host is no longer "
                                                          "the machine it enrolled as); null while it claims")
    created_at: datetime


class ApiTokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128)


class ApiTokenIssued(BaseModel):
    id: int
    name: str
    token: str = Field(description="Shown once, stored hashed")
