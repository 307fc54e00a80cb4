from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from perfci_core.result import BenchConfig

BackendChoice = Literal["auto", "pmu", "sim", "tsc"]


class ConfigCreate(BenchConfig):
    """The agent's BenchConfig (same fields, same limits) plus how the server schedules it."""

    backend: BackendChoice = "auto"
    repetitions: int = Field(5, ge=1, le=100)
    enabled: bool = True


class ConfigUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = None
    backend: BackendChoice | None = None
    repetitions: int | None = Field(None, ge=1, le=100)


class ConfigRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    harness: str
    pkt_size: int
    flows: int
    routes: str
    packets: int
    warmup: int
    lcores: int | None = None
    scaling: bool = False
    backend: str
    repetitions: int
    enabled: bool
    created_at: datetime

    def bench_config(self) -> BenchConfig:
        """What the agent runs (and what its result document must echo)."""
        return BenchConfig(
            name=self.name,
            harness=self.harness,  # type: ignore[arg-type]
            pkt_size=self.pkt_size,
            flows=self.flows,
            routes=self.routes,
            packets=self.packets,
            warmup=self.warmup,
            lcores=self.lcores,
            scaling=self.scaling,
        )
