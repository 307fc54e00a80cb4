"""runs.notes: what a result document says about itself (physically impossible values it carried)

A result's impossible values (zero cycles per packet, a negative count, NaN) are taken out when
the document is parsed and named in its notes; the run keeps those notes, so the API can show
why a repetition lacks a metric. NULL for runs stored before this revision.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 00:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("notes", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("notes")
