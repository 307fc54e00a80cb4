"""All tables, imported in one place so ``Base.metadata`` is complete for Alembic and the tests."""

from .alert import Alert, AlertDirection, AlertGroup, AlertStatus, Creep, DetectionWindow, Suspect, SuspectState
from .base import Base, utcnow
from .bench import BenchConfig
from .bisect import Bisect, BisectStatus
from .commit_status import CommitState, CommitStatus, Delivery, StatusScope
from .job import ACTIVE_STATES, JOB_PRIORITY, Job, JobPurpose, JobState, Run, RunStatus
from .machine import Agent, ApiToken, EnrollmentToken, Machine
from .pull_request import PullRequest, PullState
from .repository import AbandonedCommit, Branch, BranchCommit, Commit, Push, Repository, WebhookDelivery
from .result import MetricValue, Sample

__all__ = [
    "AbandonedCommit",
    "ACTIVE_STATES",
    "JOB_PRIORITY",
    "JobPurpose",
    "Agent",
    "Alert",
    "AlertDirection",
    "AlertGroup",
    "AlertStatus",
    "Creep",
    "Suspect",
    "SuspectState",
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
    "Job",
    "JobState",
    "Machine",
    "MetricValue",
    "PullRequest",
    "PullState",
    "Push",
    "Repository",
    "Run",
    "RunStatus",
    "Sample",
    "StatusScope",
    "WebhookDelivery",
    "utcnow",
]
