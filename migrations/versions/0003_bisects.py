"""bisects (server-orchestrated bisection)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21 06:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('bisects',
    sa.Column('repository_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('branch_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('machine_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('config_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('metric', sa.String(length=64), nullable=False),
    sa.Column('backend', sa.String(length=8), nullable=False),
    sa.Column('good_commit_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('bad_commit_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('commit_ids', sa.JSON(), nullable=False),
    sa.Column('alert_group_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('state', sa.JSON(), nullable=False),
    sa.Column('scheduled', sa.JSON(), nullable=False),
    sa.Column('result', sa.JSON(), nullable=False),
    sa.Column('parent_commit_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('culprit_commit_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('repetitions', sa.Integer(), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("status IN ('running', 'culprit', 'ambiguous', 'unconfirmed', 'no_change', 'inconclusive', 'failed')", name=op.f('ck_bisects_status')),
    sa.ForeignKeyConstraint(['alert_group_id'], ['alert_groups.id'], name=op.f('fk_bisects_alert_group_id_alert_groups'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['bad_commit_id'], ['commits.id'], name=op.f('fk_bisects_bad_commit_id_commits'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['branch_id'], ['branches.id'], name=op.f('fk_bisects_branch_id_branches'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['config_id'], ['bench_configs.id'], name=op.f('fk_bisects_config_id_bench_configs'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['culprit_commit_id'], ['commits.id'], name=op.f('fk_bisects_culprit_commit_id_commits'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['good_commit_id'], ['commits.id'], name=op.f('fk_bisects_good_commit_id_commits'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['machine_id'], ['machines.id'], name=op.f('fk_bisects_machine_id_machines'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['parent_commit_id'], ['commits.id'], name=op.f('fk_bisects_parent_commit_id_commits'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['repository_id'], ['repositories.id'], name=op.f('fk_bisects_repository_id_repositories'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_bisects'))
    )
    op.create_index(op.f('ix_bisects_alert_group_id'), 'bisects', ['alert_group_id'], unique=False)
    op.create_index('ix_bisects_status_machine_id_config_id', 'bisects', ['status', 'machine_id', 'config_id'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_bisects_status_machine_id_config_id', table_name='bisects')
    op.drop_index(op.f('ix_bisects_alert_group_id'), table_name='bisects')
    op.drop_table('bisects')
