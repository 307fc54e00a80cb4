"""detection_windows: the window each series' detection last analysed, cached between detections

Detection used to re-read every repetition of the last ``detection_window_commits`` measured
commits of a machine x config on every task; with this cache it reads only the new points. The
rows are a cache: deleting them costs one full read per series, never a verdict.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "detection_windows",
        sa.Column("branch_id", _ID, sa.ForeignKey("branches.id", ondelete="CASCADE", name="fk_detection_windows_branch_id_branches"), nullable=False),
        sa.Column("machine_id", _ID, sa.ForeignKey("machines.id", ondelete="CASCADE", name="fk_detection_windows_machine_id_machines"), nullable=False),
        sa.Column("config_id", _ID, sa.ForeignKey("bench_configs.id", ondelete="CASCADE", name="fk_detection_windows_config_id_bench_configs"), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("branch_id", "machine_id", "config_id", name="pk_detection_windows"),
    )


def downgrade() -> None:
    op.drop_table("detection_windows")
