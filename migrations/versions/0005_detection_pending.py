"""runs.detected_at: the successful runs detection has yet to analyse

Detection is coalesced per machine (at most one task waits in the queue for a machine), so the
database, not the task message, says which runs still need it.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21 09:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PENDING = "status = 'ok' AND detected_at IS NULL"


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("detected_at", sa.DateTime(timezone=True), nullable=True))
    # Runs stored before this revision were analysed by the per-upload task that preceded it.
    op.execute("UPDATE runs SET detected_at = COALESCE(received_at, created_at) WHERE status = 'ok'")
    op.create_index(
        "ix_runs_detection_pending", "runs", ["job_id"], unique=False,
        postgresql_where=sa.text(_PENDING), sqlite_where=sa.text(_PENDING),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_detection_pending", table_name="runs", postgresql_where=sa.text(_PENDING), sqlite_where=sa.text(_PENDING))
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("detected_at")
