"""The Celery application: Redis broker when PERFCI_BROKER_URL is set, in-process (eager) otherwise.

Start a worker with `perfci worker` (or `celery -A perfci_server.celery_app worker`), the periodic
lease sweep with `perfci beat`.
"""

from __future__ import annotations

from celery import Celery
from celery.app.registry import TaskRegistry
from celery.signals import setup_logging, worker_process_init

from . import db, logs
from .settings import get_settings

REQUEUE_TASK = "perfci.jobs.requeue_expired_leases"
RESEND_STATUSES_TASK = "perfci.forge.resend_pending"
SETTLE_STATUSES_TASK = "perfci.forge.settle_pending"
BISECT_SWEEP_TASK = "perfci.bisect.advance_running"
DETECTION_SWEEP_TASK = "perfci.alerts.detect_stragglers"
COMPLETE_PUSHES_TASK = "perfci.repos.complete_pushes"

# The modules that register the tasks, by name: they import celery_app (and their services, which
# import dispatch), so importing them here would close a circle. A worker imports them when it
# starts; a process that sends tasks imports them with `registered_tasks()`.
TASK_MODULES = (
    "perfci_server.alerts.tasks",
    "perfci_server.forge.tasks",
    "perfci_server.jobs.tasks",
    "perfci_server.bisect.tasks",
    "perfci_server.repos.tasks",
    "perfci_server.pulls.tasks",
)


def make_celery() -> Celery:
    settings = get_settings()
    app = Celery("perfci", include=list(TASK_MODULES))
    app.conf.update(
        broker_url=settings.broker_url or "memory://",
        # Tasks write their effects to the database; nobody waits on a Celery result.
        task_ignore_result=True,
        result_backend=None,
        task_always_eager=settings.tasks_run_eagerly,
        task_eager_propagates=False,
        task_acks_late=True,  # a worker killed mid-task leaves it on the queue; tasks are idempotent
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_time_limit=settings.task_time_limit_seconds,
        task_soft_time_limit=max(settings.task_time_limit_seconds - 10, 1),
        task_default_queue="perfci",
        broker_connection_retry_on_startup=True,
        timezone="UTC",
        beat_schedule={
            "requeue-expired-leases": {"task": REQUEUE_TASK, "schedule": settings.requeue_interval_seconds},
            "resend-pending-commit-statuses": {"task": RESEND_STATUSES_TASK, "schedule": settings.forge_resend_interval_seconds},
            "settle-pending-commit-statuses": {"task": SETTLE_STATUSES_TASK, "schedule": settings.detection_sweep_interval_seconds},
            "advance-running-bisects": {"task": BISECT_SWEEP_TASK, "schedule": settings.requeue_interval_seconds},
            "detect-stragglers": {"task": DETECTION_SWEEP_TASK, "schedule": settings.detection_sweep_interval_seconds},
            "complete-incomplete-pushes": {"task": COMPLETE_PUSHES_TASK, "schedule": settings.push_retry_interval_seconds},
        },
    )
    return app


celery_app = make_celery()


@worker_process_init.connect
def _fresh_engine_per_process(**_: object) -> None:
    # A forked pool process must not share the parent's database connections.
    db.reset_engine()


# One line per task (logs.py), in a worker and in the embedded in-process mode alike.
logs.log_tasks()


@setup_logging.connect
def _perfci_logs(**_: object) -> None:
    # A worker or beat started by `celery` itself: our format and level, not Celery's (its own
    # --loglevel gives way to PERFCI_LOG_LEVEL); `perfci worker|beat` configured them already.
    if not logs.configured():
        logs.configure(get_settings())


def registered_tasks() -> TaskRegistry:
    """The task registry with every task module imported (the embedded default runs tasks in-process)."""
    celery_app.loader.import_default_modules()
    return celery_app.tasks
