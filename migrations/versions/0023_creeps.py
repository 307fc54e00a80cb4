"""creeps: a level that moved gradually over a range of commits, kept apart from alerts

- creeps: per branch x machine x config x metric x backend, the creeps the latest detection saw
  (analysis.detect.Creep): first and last commit of the ramp, its whole move, the trend's p-value.
- dash_creeps: the view the alerts dashboard lists them from (granted to the dashboard role).

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-28 15:00:00
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

DASH_CREEPS = """
    SELECT c.id, c.direction, c.branch_id, b.name AS branch, c.machine_id, m.name AS machine, c.config_id,
           cfg.name AS config, c.metric, c.backend, c.change_pct, c.p_value,
           fc.position AS first_position, fc.short_sha AS first_sha, fc.commit_url AS first_url,
           lc.position AS last_position, lc.short_sha AS last_sha, lc.commit_url AS last_url,
           c.created_at, c.updated_at
    FROM creeps c
    JOIN branches b ON b.id = c.branch_id
    JOIN machines m ON m.id = c.machine_id
    JOIN bench_configs cfg ON cfg.id = c.config_id
    JOIN dash_branch_commits fc ON fc.branch_id = c.branch_id AND fc.commit_id = c.first_commit_id
    JOIN dash_branch_commits lc ON lc.branch_id = c.branch_id AND lc.commit_id = c.last_commit_id
"""


def _grant_dashboard_views() -> None:
    """0008's grant of every dash_* view to the dashboard role (revision files are not a package)."""
    path = Path(__file__).with_name("0008_dashboard_reader.py")
    spec = importlib.util.spec_from_file_location("perfci_migration_0008", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.grant_dashboard_views()


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
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"CREATE VIEW dash_creeps AS {DASH_CREEPS}")
        _grant_dashboard_views()


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP VIEW IF EXISTS dash_creeps")
    op.drop_table("creeps")
