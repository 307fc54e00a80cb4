"""confirmation rounds measure a suspect and the commit before it interleaved, as partner jobs

- jobs.partner_job_id: the job measured with this one in one interleaved session (A B A B ...,
  alerts.confirm queues a suspect's k - 1 and k as partners; the claim leases both to one agent).
- runs.paired_with: set on an attempt that was measured interleaved, to the partner job's id (a
  side measured again alone later has none): detection pairs the repetitions of two runs that
  name each other's jobs.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25 21:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("partner_job_id", ID, nullable=True))
        batch.create_foreign_key(op.f("fk_jobs_partner_job_id_jobs"), "jobs", ["partner_job_id"], ["id"], ondelete="SET NULL")
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("paired_with", ID, nullable=True))
        batch.create_foreign_key(op.f("fk_runs_paired_with_jobs"), "jobs", ["paired_with"], ["id"], ondelete="SET NULL")


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_constraint(op.f("fk_runs_paired_with_jobs"), type_="foreignkey")
        batch.drop_column("paired_with")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint(op.f("fk_jobs_partner_job_id_jobs"), type_="foreignkey")
        batch.drop_column("partner_job_id")
