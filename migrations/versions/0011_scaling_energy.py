"""scaling configs (lcores, scaling) and what a result could not measure (runs.unavailable)

A scaling config runs every repetition of a commit at 1..lcores forwarding lcores and fits
Amdahl's serial fraction (perfci_core.analysis.scaling); lcores NULL means one lcore for an
ordinary config and the agent's allotted cores for a scaling one. ``runs.unavailable`` keeps the
result's "not available, and why" notes (energy where RAPL is not readable), never a number.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24 00:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("bench_configs") as batch:
        batch.add_column(sa.Column("lcores", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("scaling", sa.Boolean(), server_default=sa.false(), nullable=False))
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("unavailable", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("unavailable")
    with op.batch_alter_table("bench_configs") as batch:
        batch.drop_column("scaling")
        batch.drop_column("lcores")
