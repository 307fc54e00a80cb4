"""job queued notify: PostgreSQL tells the servers when a job is queued, so waiting claims answer at once

- perfci_job_queued(): NOTIFY perfci_job_queued with the job's machine id as payload.
- trigger jobs_queued_notify: after a row of jobs is inserted queued or set back to queued (a retry,
  a release, a lease that expired). Notifications go out on commit, one per machine and transaction.
SQLite has no notifications: there, a waiting claim looks again at short intervals.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28 14:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHANNEL = "perfci_job_queued"  # perfci_server.jobs.wakeups.CHANNEL


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"""
        CREATE FUNCTION perfci_job_queued() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('{CHANNEL}', NEW.machine_id::text);
            RETURN NULL;
        END
        $$
    """)
    op.execute("""
        CREATE TRIGGER jobs_queued_notify AFTER INSERT OR UPDATE OF state ON jobs
        FOR EACH ROW WHEN (NEW.state = 'queued') EXECUTE FUNCTION perfci_job_queued()
    """)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER jobs_queued_notify ON jobs")
    op.execute("DROP FUNCTION perfci_job_queued()")
