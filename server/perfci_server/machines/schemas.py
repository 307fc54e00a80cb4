from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict


class MachineRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    fingerprint: str
    name: str
    details: dict[str, Any]
    enabled: bool
    created_at: datetime


class MachineUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = None
    name: str | None = None
