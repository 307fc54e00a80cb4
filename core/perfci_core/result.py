"""The result document: what `perfci measure --json` prints and what an agent uploads.

This is the contract between agent and server (the server validates uploads with these models),
so it is versioned by ``schema``. Every repetition is kept as a sample with its raw counts and the
metrics derived from them; a metric value names the backend that produced it, because simulated,
PMU and TSC values of the same metric are different series and are never mixed.

Physically impossible values (the catalogue's bounds: a zero or negative cycles/instructions per
packet, IPC <= 0, a negative count, NaN or infinity) are not measurements. Validating a document
takes them out and says so in its ``notes``: an impossible metric value is dropped from its
sample (so nothing downstream — the server's series, detection, compare, bisect — ever uses it),
an impossible raw count becomes absent (None). The rest of the run is kept: one bad derivation
must not cost the other repetitions and metrics. The same rule runs where the agent builds the
document from its own derivations and where the server parses an upload (the note names the
value, so an upload that carried it is flagged, not silently cleaned).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from . import metrics
from .analysis import scaling

SCHEMA = "perfci.result/1"
MAX_SAMPLES = 100
MAX_RAW_KEYS = 200
MAX_TEXT = 64 * 1024
MAX_NOTES = 200
SIM_PACKETS = 100_000  # packet counts a `sim` run is capped at (BenchConfig.as_run_by)
SIM_WARMUP = 2_000
# Every integer is bounded to the column it is stored in (the server's bounded.py reuses these):
# past it the database driver fails instead of the model refusing the document.
INTEGER_MAX = 2**31 - 1  # INTEGER columns: repetitions, and small counts kept in JSON
BIGINT_MAX = 2**63 - 1  # BIGINT columns: packet counts; any other integer kept in JSON
Count32 = Annotated[int, Field(ge=0, le=INTEGER_MAX)]
Int64 = Annotated[int, Field(ge=-BIGINT_MAX - 1, le=BIGINT_MAX)]
# A machine description's values (cpu model, cores, memory bytes, ...).
MachineValue = str | Int64 | float | bool | None
# Host state, not identity: what tuning changes on the same machine (the agent role reserves
# hugepages on a fresh host; the governor is set per boot). Every run records it (its machine and
# tuning), so two results that differ only here are still comparable.
HOST_STATE_KEYS = frozenset({"governor", "hugepages_total", "hugepage_size_kb"})


def same_identity(machine: Mapping[str, object], other: Mapping[str, object]) -> bool:
    """Whether two machine descriptions name the same machine (they may differ in host state)."""
    return all(machine.get(key) == other.get(key) for key in (machine.keys() | other.keys()) - HOST_STATE_KEYS)

Sha = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}$")]
Name = Annotated[str, StringConstraints(min_length=1, max_length=128)]
Status = Literal["ok", "build_failed", "run_failed"]


class BenchConfig(BaseModel):
    """A named benchmark configuration: which harness, what traffic, how long."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name = "self-64B"
    harness: Literal["self", "pcap", "ports"] = "self"
    pkt_size: int = Field(64, ge=64, le=1518)
    flows: int = Field(1024, ge=1, le=1 << 20)
    routes: str = "default"  # "default" (built-in table) or a path relative to dataplane/
    packets: int = Field(2_000_000, ge=1, le=BIGINT_MAX)
    warmup: int = Field(200_000, ge=0, le=BIGINT_MAX)
    # Forwarding lcores. A `scaling` config runs every repetition at 1, 2, 4, ... and `lcores` lcores
    # and fits Amdahl's serial fraction from three or more counts (None: as many as the agent is
    # allotted); otherwise every run forwards on `lcores` lcores (None: one).
    lcores: int | None = Field(None, ge=1, le=64)
    scaling: bool = False

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

    rep: int = Field(ge=0, le=INTEGER_MAX)
    raw: dict[Name, float | None] = Field(default_factory=dict, max_length=MAX_RAW_KEYS)
    # perf's running percentage per multiplexed event (< 100 means the count was scaled)
    running_pct: dict[Name, float] = Field(default_factory=dict, max_length=MAX_RAW_KEYS)
    metrics: list[MetricValue] = Field(default_factory=list, max_length=len(metrics.CATALOGUE) * 3)

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
    runnable: Count32 | None = None  # tasks running or ready to run at the end
    cpus: Count32 | None = None
    remeasured: Count32 = 0  # measurements the agent discarded as noisy before this one


class ReusedFrom(BaseModel):
    """A ``sim`` result whose samples were not simulated again: sim counts are exact and deterministic,
    and this machine had measured the same binary (``build_id``, the build key) with the same config,
    tool version and options; these are that measurement's samples, its metrics derived anew."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    commit: Sha  # the commit that measurement was made for (the same build inputs as this one)
    started_at: datetime  # that measurement's own times (its result document's)
    finished_at: datetime


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
    machine: dict[Name, MachineValue] = Field(max_length=100)
    machine_id: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    tuning: Tuning = Field(default_factory=Tuning)
    samples: list[Sample] = Field(default_factory=list, max_length=MAX_SAMPLES)
    # What this result could not measure and why (e.g. "energy": "no RAPL: ..."): absent, never a number.
    unavailable: dict[Name, Annotated[str, StringConstraints(max_length=2000)]] = Field(default_factory=dict, max_length=20)
    noisy: NoisyRun | None = None  # set when the repetitions spread far beyond the usual noise
    reused_from: ReusedFrom | None = None  # set when the samples are an earlier sim measurement's
    started_at: datetime
    finished_at: datetime
    # What a reader of the result must know about it: values flagged as impossible (below).
    notes: list[Annotated[str, StringConstraints(max_length=2000)]] = Field(default_factory=list, max_length=MAX_NOTES)

    @model_validator(mode="after")
    def _flag_impossible(self) -> ResultDocument:
        for note in flag_impossible(self.samples) + flag_unidentified(self.samples):
            if note not in self.notes and len(self.notes) < MAX_NOTES:
                self.notes.append(note)
        return self

    @model_validator(mode="after")
    def _consistent(self) -> ResultDocument:
        if self.status == "ok" and not self.samples:
            raise ValueError("an ok result carries at least one sample")
        if self.status != "ok" and not self.reason:
            raise ValueError(f"a {self.status} result says why (reason)")
        reps = [s.rep for s in self.samples]
        if len(reps) != len(set(reps)):
            raise ValueError("sample repetitions must be unique")
        if self.reused_from is not None and (self.status != "ok" or self.backend is not metrics.Backend.SIM):
            raise ValueError("only an ok sim result reuses an earlier measurement (reused_from)")
        return self


def flag_impossible(samples: list[Sample]) -> list[str]:
    """Take physically impossible values out of ``samples`` (in place); one note per metric or raw
    key naming the repetitions and values, and why (the catalogue's bounds)."""
    dropped: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    absent: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for sample in samples:
        kept = []
        for m in sample.metrics:
            why = metrics.get(m.metric).impossible(m.value)
            if why is None:
                kept.append(m)
            else:
                dropped.setdefault((m.metric, m.backend.value, why), []).append((sample.rep, m.value))
        sample.metrics = kept
        for key, x in sample.raw.items():
            why = metrics.impossible_count(x) if x is not None else None
            if why is not None:
                absent.setdefault((key, why), []).append((sample.rep, x))
                sample.raw[key] = None
    notes = [f"impossible {metric} ({backend}) {_where(seen)}: {why}; not used" for (metric, backend, why), seen in dropped.items()]
    notes += [f"impossible raw count {key} {_where(seen)}: {why}; taken as absent" for (key, why), seen in absent.items()]
    return notes


SERIAL_FRACTIONS = ("serial_fraction", "serial_fraction_low", "serial_fraction_high", "serial_fraction_calibrated")


def flag_unidentified(samples: list[Sample]) -> list[str]:
    """Take a serial fraction out of ``samples`` (in place) whose runs, by their ``lc.<n>.*`` raw
    keys, cover fewer lcore counts than B needs (:func:`perfci_core.analysis.scaling.unidentified`):
    from two it is the data itself, not a fit. A sample without those keys is left as it is."""
    dropped: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    for sample in samples:
        counts = scaling.points_of(sample.raw)
        why = scaling.unidentified(counts) if counts else None
        if why is None:
            continue
        for m in sample.metrics:
            if m.metric in SERIAL_FRACTIONS:
                dropped.setdefault((m.metric, m.backend.value, why), []).append((sample.rep, m.value))
        sample.metrics = [m for m in sample.metrics if m.metric not in SERIAL_FRACTIONS]
    return [f"unidentified {metric} ({backend}) {_where(seen)}: {why}; not used" for (metric, backend, why), seen in dropped.items()]


def _where(seen: list[tuple[int, float]]) -> str:
    shown = ", ".join(f"rep {rep} = {value!r}" for rep, value in seen[:5])
    return shown + (f" and {len(seen) - 5} more" if len(seen) > 5 else "")
