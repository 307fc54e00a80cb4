"""a job may measure more repetitions than its config: an interleaved bisect session takes the
pairs its paired test needs to reach alpha

- jobs.repetitions: the repetitions this job measures; NULL: the config's (every job before).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26 17:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("repetitions", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("repetitions")
