"""creeps: a level that moved gradually over a range of commits, kept apart from alerts

- creeps: per branch x machine x config x metric x backend, the creeps the latest detection saw
  (analysis.detect.Creep): first and last commit of the ramp, its whole move, the trend's p-value.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-28 15:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "creeps",
        sa.Column("branch_id", _ID, nullable=False),
        sa.Column("machine_id", _ID, nullable=False),
        sa.Column("config_id", _ID, nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("backend", sa.String(8), nullable=False),
        sa.Column("first_commit_id", _ID, nullable=False),
        sa.Column("last_commit_id", _ID, nullable=False),
        sa.Column("direction", sa.String(16), nullable=False),
        sa.Column("change_pct", sa.Double(), nullable=False),
        sa.Column("p_value", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", _ID, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("direction IN ('regression', 'improvement', 'change')", name=op.f("ck_creeps_direction")),
        sa.ForeignKeyConstraint(["branch_id"], ["branches.id"], name=op.f("fk_creeps_branch_id_branches"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["config_id"], ["bench_configs.id"], name=op.f("fk_creeps_config_id_bench_configs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["machine_id"], ["machines.id"], name=op.f("fk_creeps_machine_id_machines"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["first_commit_id"], ["commits.id"], name=op.f("fk_creeps_first_commit_id_commits"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["last_commit_id"], ["commits.id"], name=op.f("fk_creeps_last_commit_id_commits"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_creeps")),
    )
    op.create_index("ix_creeps_series", "creeps", ["branch_id", "machine_id", "config_id"])
    op.create_index(op.f("ix_creeps_machine_id"), "creeps", ["machine_id"])


def downgrade() -> None:
    op.drop_table("creeps")
