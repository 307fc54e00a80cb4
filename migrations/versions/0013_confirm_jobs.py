"""jobs say why they exist and claim by priority; suspects (pending changes) get a table

- jobs.purpose (push / bisect / confirm), jobs.reason (text: the suspect a confirm job decides,
  the bisect a step belongs to), jobs.priority (claimed highest first, then oldest: bisect and
  confirm jobs before push jobs) and jobs.round (0: the commit's own measurement; 1, 2, ...:
  confirmation rounds). The unique key becomes (commit, machine, config, round): one commit may
  be measured again on the same machine x config. Existing jobs are push jobs of round 0.
- the claim index (machine_id, state, priority DESC, id) replaces (machine_id, state, id): the
  claim's ORDER BY priority DESC, id stays one index scan.
- suspects: changes detection finds likely but cannot decide yet (alerts.confirm), and the
  dash_suspects view the alerts dashboard lists them from (granted to the dashboard role).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24 00:30:00
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DASH_SUSPECTS = """
    SELECT s.id, s.state, s.why, s.direction, s.branch_id, b.name AS branch, s.machine_id, m.name AS machine,
           s.config_id, cfg.name AS config, s.metric, s.backend, s.change_pct, s.p_value,
           sc.position AS suspect_position, sc.short_sha AS suspect_sha, sc.subject AS suspect_subject,
           sc.commit_url AS suspect_url, sc.plot_time, s.reason,
           (SELECT count(*) FROM jobs j
            WHERE j.machine_id = s.machine_id AND j.config_id = s.config_id AND j.purpose = 'confirm'
              AND j.state IN ('queued', 'leased', 'running')) AS confirm_jobs_active,
           s.created_at, s.updated_at
    FROM suspects s
    JOIN branches b ON b.id = s.branch_id
    JOIN machines m ON m.id = s.machine_id
    JOIN bench_configs cfg ON cfg.id = s.config_id
    JOIN dash_branch_commits sc ON sc.branch_id = s.branch_id AND sc.commit_id = s.suspect_commit_id
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
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("purpose", sa.String(16), server_default="push", nullable=False))
        batch.add_column(sa.Column("priority", sa.Integer(), server_default="0", nullable=False))
        batch.add_column(sa.Column("round", sa.Integer(), server_default="0", nullable=False))
        batch.add_column(sa.Column("reason", sa.Text(), server_default="", nullable=False))
        batch.create_check_constraint(op.f("ck_jobs_purpose"), "purpose IN ('push', 'bisect', 'confirm')")
        batch.drop_constraint("uq_jobs_commit_id_machine_id_config_id", type_="unique")
        batch.create_unique_constraint(op.f("uq_jobs_commit_id_machine_id_config_id_round"),
                                       ["commit_id", "machine_id", "config_id", "round"])
    op.drop_index("ix_jobs_machine_id_state_id", table_name="jobs")
    op.create_index("ix_jobs_claim", "jobs", ["machine_id", "state", sa.text("priority DESC"), "id"])
    op.create_table(
        "suspects",
        sa.Column("branch_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("machine_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("config_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("backend", sa.String(8), nullable=False),
        sa.Column("suspect_commit_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("commit_ids", sa.JSON(), nullable=False),
        sa.Column("why", sa.String(16), nullable=False),
        sa.Column("direction", sa.String(16), nullable=False),
        sa.Column("change_pct", sa.Double(), nullable=False),
        sa.Column("p_value", sa.Double(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("state IN ('pending', 'exhausted', 'confirmed', 'rejected')", name=op.f("ck_suspects_state")),
        sa.CheckConstraint("why IN ('unconfirmed', 'unpinned')", name=op.f("ck_suspects_why")),
        sa.ForeignKeyConstraint(["branch_id"], ["branches.id"], name=op.f("fk_suspects_branch_id_branches"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["config_id"], ["bench_configs.id"], name=op.f("fk_suspects_config_id_bench_configs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["machine_id"], ["machines.id"], name=op.f("fk_suspects_machine_id_machines"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["suspect_commit_id"], ["commits.id"], name=op.f("fk_suspects_suspect_commit_id_commits"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_suspects")),
        sa.UniqueConstraint("branch_id", "machine_id", "config_id", "metric", "backend", "suspect_commit_id",
                            name="uq_suspects_series_commit"),
    )
    op.create_index("ix_suspects_state_id", "suspects", ["state", "id"])
    op.create_index(op.f("ix_suspects_machine_id"), "suspects", ["machine_id"])
    op.create_index(op.f("ix_suspects_suspect_commit_id"), "suspects", ["suspect_commit_id"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"CREATE VIEW dash_suspects AS {DASH_SUSPECTS}")
        _grant_dashboard_views()


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP VIEW IF EXISTS dash_suspects")
    op.drop_table("suspects")
    op.drop_index("ix_jobs_claim", table_name="jobs")
    # Confirmation rounds have no place in the old key: they go (their runs and values with them).
    op.execute("DELETE FROM jobs WHERE round > 0")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint("uq_jobs_commit_id_machine_id_config_id_round", type_="unique")
        batch.create_unique_constraint(op.f("uq_jobs_commit_id_machine_id_config_id"), ["commit_id", "machine_id", "config_id"])
        batch.drop_constraint(op.f("ck_jobs_purpose"), type_="check")
        batch.drop_column("reason")
        batch.drop_column("round")
        batch.drop_column("priority")
        batch.drop_column("purpose")
    op.create_index("ix_jobs_machine_id_state_id", "jobs", ["machine_id", "state", "id"])
