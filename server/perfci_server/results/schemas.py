from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class UploadAccepted(BaseModel):
    job_id: int
    attempt: int
    run_id: int
    run_status: str
    job_state: str
    samples: int
    # Values stored (sample x metric x backend), not rows: metric_values holds one row per metric x
    # backend with every sample's value in it.
    metric_values: int
    duplicate: bool = Field(False, description="True when this exact result had already been stored")
    notes: list[str] = Field(default_factory=list, description="physically impossible values the document carried "
                             "(not stored), one note per metric or raw count")


class SeriesSample(BaseModel):
    rep: int
    value: float


class SeriesPoint(BaseModel):
    position: int = Field(description="The commit's position on the branch")
    commit: str
    committed_at: datetime | None
    run_id: int
    samples: list[SeriesSample]


class Series(BaseModel):
    repository_id: int
    branch: str
    machine_id: int
    config: str
    metric: str
    backend: str
    unit: str
    direction: str
    points: list[SeriesPoint]
    next_after_position: int | None = Field(None, description="Pass as after_position for the next page")


class MetricComparison(BaseModel):
    metric: str
    backend: str
    unit: str
    direction: str
    n_base: int
    n_head: int
    base_median: float
    head_median: float
    change_pct: float | None = Field(description="(head - base) / base x 100; null when the base median is 0")
    p_value: float | None = Field(description="min(Kolmogorov-Smirnov, Mann-Whitney U); 0 or 1 under the exact rule of sim")
    verdict: str = Field(description="same / different / unknown (analysis core's two-sample verdict)")
    worse: bool = Field(description="The medians moved in the metric's bad direction (not a verdict)")


class Comparison(BaseModel):
    repository_id: int
    machine_id: int
    config: str
    base: str
    head: str
    metrics: list[MetricComparison]
    # the agent marked the commit's run noisy (repetitions spread far beyond the machine's usual
    # noise): its verdicts say more about the host at that moment than about the commit
    noisy_base: bool = False
    noisy_head: bool = False
