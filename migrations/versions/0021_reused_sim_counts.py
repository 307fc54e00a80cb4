"""reused sim counts: a run whose samples are an earlier sim measurement of the same binary on the machine

- runs.reused_from: the agent's ReusedFrom (the commit and times of the measurement the samples come
  from) and the run that measurement was uploaded as (run_id, NULL when the server has none); NULL for
  a run that was measured.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28 08:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("reused_from", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("reused_from")
