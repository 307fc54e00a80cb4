"""alerts

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21 06:37:15.982184
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('alert_groups',
    sa.Column('repository_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('branch_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('machine_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('last_good_commit_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('first_bad_commit_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('direction', sa.String(length=16), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('triage_note', sa.Text(), nullable=False),
    sa.Column('triaged_by', sa.String(length=128), nullable=False),
    sa.Column('triaged_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('explanation', sa.JSON(), nullable=False),
    sa.Column('summary', sa.Text(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("direction IN ('regression', 'improvement')", name=op.f('ck_alert_groups_direction')),
    sa.CheckConstraint("status IN ('untriaged', 'acknowledged', 'invalid', 'fixed')", name=op.f('ck_alert_groups_status')),
    sa.ForeignKeyConstraint(['branch_id'], ['branches.id'], name=op.f('fk_alert_groups_branch_id_branches'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['first_bad_commit_id'], ['commits.id'], name=op.f('fk_alert_groups_first_bad_commit_id_commits'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['last_good_commit_id'], ['commits.id'], name=op.f('fk_alert_groups_last_good_commit_id_commits'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['machine_id'], ['machines.id'], name=op.f('fk_alert_groups_machine_id_machines'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['repository_id'], ['repositories.id'], name=op.f('fk_alert_groups_repository_id_repositories'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_alert_groups')),
    sa.UniqueConstraint('branch_id', 'machine_id', 'first_bad_commit_id', name=op.f('uq_alert_groups_branch_id_machine_id_first_bad_commit_id'))
    )
    op.create_index(op.f('ix_alert_groups_first_bad_commit_id'), 'alert_groups', ['first_bad_commit_id'], unique=False)
    op.create_index(op.f('ix_alert_groups_machine_id'), 'alert_groups', ['machine_id'], unique=False)
    op.create_index('ix_alert_groups_status_id', 'alert_groups', ['status', 'id'], unique=False)
    op.create_table('alerts',
    sa.Column('group_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('config_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('metric', sa.String(length=64), nullable=False),
    sa.Column('backend', sa.String(length=8), nullable=False),
    sa.Column('direction', sa.String(length=16), nullable=False),
    sa.Column('last_good_commit_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('first_bad_commit_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('before_median', sa.Double(), nullable=False),
    sa.Column('after_median', sa.Double(), nullable=False),
    sa.Column('change_pct', sa.Double(), nullable=False),
    sa.Column('confidence', sa.Double(), nullable=False),
    sa.Column('p_value', sa.Double(), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("direction IN ('regression', 'improvement')", name=op.f('ck_alerts_direction')),
    sa.ForeignKeyConstraint(['config_id'], ['bench_configs.id'], name=op.f('fk_alerts_config_id_bench_configs'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['first_bad_commit_id'], ['commits.id'], name=op.f('fk_alerts_first_bad_commit_id_commits'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['group_id'], ['alert_groups.id'], name=op.f('fk_alerts_group_id_alert_groups'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['last_good_commit_id'], ['commits.id'], name=op.f('fk_alerts_last_good_commit_id_commits'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_alerts')),
    sa.UniqueConstraint('group_id', 'config_id', 'metric', 'backend', name=op.f('uq_alerts_group_id_config_id_metric_backend'))
    )
    op.create_index(op.f('ix_alerts_group_id'), 'alerts', ['group_id'], unique=False)
    op.create_table('commit_statuses',
    sa.Column('repository_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('commit_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('machine_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('context', sa.String(length=255), nullable=False),
    sa.Column('description', sa.String(length=255), nullable=False),
    sa.Column('target_url', sa.String(length=1024), nullable=True),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('delivery', sa.String(length=16), nullable=False),
    sa.Column('sent_version', sa.Integer(), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('last_error', sa.Text(), nullable=False),
    sa.Column('sent_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("delivery IN ('pending', 'sent', 'failed', 'disabled')", name=op.f('ck_commit_statuses_delivery')),
    sa.CheckConstraint("state IN ('success', 'failure')", name=op.f('ck_commit_statuses_state')),
    sa.ForeignKeyConstraint(['commit_id'], ['commits.id'], name=op.f('fk_commit_statuses_commit_id_commits'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['machine_id'], ['machines.id'], name=op.f('fk_commit_statuses_machine_id_machines'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['repository_id'], ['repositories.id'], name=op.f('fk_commit_statuses_repository_id_repositories'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_commit_statuses')),
    sa.UniqueConstraint('commit_id', 'machine_id', name=op.f('uq_commit_statuses_commit_id_machine_id'))
    )
    op.create_index('ix_commit_statuses_delivery_updated_at', 'commit_statuses', ['delivery', 'updated_at'], unique=False)
    op.create_index(op.f('ix_commit_statuses_machine_id'), 'commit_statuses', ['machine_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_commit_statuses_machine_id'), table_name='commit_statuses')
    op.drop_index('ix_commit_statuses_delivery_updated_at', table_name='commit_statuses')
    op.drop_table('commit_statuses')
    op.drop_index(op.f('ix_alerts_group_id'), table_name='alerts')
    op.drop_table('alerts')
    op.drop_index('ix_alert_groups_status_id', table_name='alert_groups')
    op.drop_index(op.f('ix_alert_groups_machine_id'), table_name='alert_groups')
    op.drop_index(op.f('ix_alert_groups_first_bad_commit_id'), table_name='alert_groups')
    op.drop_table('alert_groups')
