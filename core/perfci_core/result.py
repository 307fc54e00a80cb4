"""The result document: what `perfci measure --json` prints and what an agent uploads.

This is the contract between agent and server (the server validates uploads with these models),
so it is versioned by ``schema``. Every repetition is kept as a sample with its raw counts and the
metrics derived from them; a metric value names the backend that produced it, because simulated,
PMU and TSC values of the same metric are different series and are never mixed.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from . import metrics

SCHEMA = "perfci.result/1"
MAX_SAMPLES = 100
MAX_RAW_KEYS = 200
MAX_TEXT = 64 * 1024
SIM_PACKETS = 100_000  # packet counts a `sim` run is capped at (BenchConfig.as_run_by)
SIM_WARMUP = 2_000

Sha = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}$")]
Name = Annotated[str, StringConstraints(min_length=1, max_length=128)]
Status = Literal["ok", "build_failed", "run_failed"]


def _finite_non_negative(value: float, what: str) -> float:
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a finite, non-negative number, got {value!r}")
    return value


class BenchConfig(BaseModel):
    """A named benchmark configuration: which harness, what traffic, how long."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name = "self-64B"
    harness: Literal["self", "pcap", "ports"] = "self"
    pkt_size: int = Field(64, ge=64, le=1518)
    flows: int = Field(1024, ge=1, le=1 << 20)
    routes: str = "default"  # "default" (built-in table) or a path relative to dataplane/
    packets: int = Field(2_000_000, ge=1)
    warmup: int = Field(200_000, ge=0)

    def as_run_by(self, backend: metrics.Backend | str) -> BenchConfig:
        """The config a backend actually runs (and its result records): `sim` caps the packet
        counts, because valgrind runs ~50x slower and its counts are exact anyway. The server
        compares uploads against this, so a capped `sim` result still matches its job."""
        if metrics.Backend(backend) is metrics.Backend.SIM:
            return self.model_copy(update={"packets": min(self.packets, SIM_PACKETS), "warmup": min(self.warmup, SIM_WARMUP)})
        return self


class MetricValue(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: Name
    backend: metrics.Backend
    value: float

    @field_validator("metric")
    @classmethod
    def _known(cls, v: str) -> str:
        metrics.get(v)
        return v

    @field_validator("value")
    @classmethod
    def _finite(cls, v: float) -> float:
        return _finite_non_negative(v, "metric value")

    @model_validator(mode="after")
    def _backend_can_measure(self) -> MetricValue:
        m = metrics.get(self.metric)
        if self.backend not in m.backends:
            raise ValueError(f"backend {self.backend.value} does not measure {self.metric}")
        return self

    @property
    def unit(self) -> str:
        return metrics.get(self.metric).unit


class Sample(BaseModel):
    """One repetition in a fresh process."""

    model_config = ConfigDict(extra="forbid")

    rep: int = Field(ge=0)
    raw: dict[Name, float | None] = Field(default_factory=dict, max_length=MAX_RAW_KEYS)
    # perf's running percentage per multiplexed event (< 100 means the count was scaled)
    running_pct: dict[Name, float] = Field(default_factory=dict, max_length=MAX_RAW_KEYS)
    metrics: list[MetricValue] = Field(default_factory=list, max_length=len(metrics.CATALOGUE) * 3)

    @field_validator("raw")
    @classmethod
    def _raw_finite(cls, v: dict[str, float | None]) -> dict[str, float | None]:
        for k, x in v.items():
            if x is not None:
                _finite_non_negative(x, f"raw count {k}")
        return v

    @model_validator(mode="after")
    def _unique_metrics(self) -> Sample:
        keys = [(m.metric, m.backend) for m in self.metrics]
        if len(keys) != len(set(keys)):
            raise ValueError("a sample holds each (metric, backend) at most once")
        return self


class Tuning(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ok: bool = True
    deviations: list[Annotated[str, StringConstraints(max_length=500)]] = Field(default_factory=list, max_length=50)


class NoisyRun(BaseModel):
    """The repetitions spread far beyond the machine's usual noise (``analysis.noise`` decides):
    the measurement says more about the host at that moment than about the commit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: Name  # the metric whose spread was judged
    spread: float = Field(ge=0)  # MAD-sigma / median of the repetitions
    low: float  # min / median
    high: float  # max / median
    threshold: float = Field(ge=0)
    basis: Annotated[str, StringConstraints(max_length=500)]
    loadavg: tuple[float, float, float] | None = None
    steal_pct: float | None = None  # CPU steal over the measurement, % of all CPU time
    runnable: int | None = None  # tasks running or ready to run at the end
    cpus: int | None = None
    remeasured: int = Field(0, ge=0)  # measurements the agent discarded as noisy before this one


class ResultDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: Literal["perfci.result/1"] = Field(SCHEMA, alias="schema")
    status: Status
    reason: Annotated[str, StringConstraints(max_length=MAX_TEXT)] | None = None
    log_tail: Annotated[str, StringConstraints(max_length=MAX_TEXT)] | None = None
    commit: Sha
    build_id: Annotated[str, StringConstraints(max_length=200)] | None = None
    config: BenchConfig
    backend: metrics.Backend
    backend_reason: Annotated[str, StringConstraints(max_length=2000)] = ""
    machine: dict[Name, str | int | float | bool | None] = Field(max_length=100)
    machine_id: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    tuning: Tuning = Field(default_factory=Tuning)
    samples: list[Sample] = Field(default_factory=list, max_length=MAX_SAMPLES)
    noisy: NoisyRun | None = None  # set when the repetitions spread far beyond the usual noise
    started_at: datetime
    finished_at: datetime

    @model_validator(mode="after")
    def _consistent(self) -> ResultDocument:
        if self.status == "ok" and not self.samples:
            raise ValueError("an ok result carries at least one sample")
        if self.status != "ok" and not self.reason:
            raise ValueError(f"a {self.status} result says why (reason)")
        reps = [s.rep for s in self.samples]
        if len(reps) != len(set(reps)):
            raise ValueError("sample repetitions must be unique")
        return self
