"""All tables, imported in one place so ``Base.metadata`` is complete for Alembic and the tests."""

from .alert import Alert, AlertDirection, AlertGroup, AlertStatus, DetectionWindow
from .base import Base, utcnow
from .bench import BenchConfig
from .bisect import Bisect, BisectStatus
from .commit_status import CommitState, CommitStatus, Delivery
from .job import ACTIVE_STATES, Job, JobState, Run, RunStatus
from .machine import Agent, ApiToken, EnrollmentToken, Machine
from .repository import Branch, BranchCommit, Commit, Forge, Push, Repository, WebhookDelivery
from .result import MetricValue, Sample

__all__ = [
    "ACTIVE_STATES",
    "Agent",
    "Alert",
    "AlertDirection",
    "AlertGroup",
    "AlertStatus",
    "ApiToken",
    "Base",
    "BenchConfig",
    "Bisect",
    "BisectStatus",
    "Branch",
    "BranchCommit",
    "Commit",
    "CommitState",
    "CommitStatus",
    "Delivery",
    "DetectionWindow",
    "EnrollmentToken",
    "Forge",
    "Job",
    "JobState",
    "Machine",
    "MetricValue",
    "Push",
    "Repository",
    "Run",
    "RunStatus",
    "Sample",
    "WebhookDelivery",
    "utcnow",
]
