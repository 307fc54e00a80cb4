"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-21 05:41:19.041772
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('api_tokens',
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_tokens')),
    sa.UniqueConstraint('token_hash', name=op.f('uq_api_tokens_token_hash'))
    )
    op.create_table('bench_configs',
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('harness', sa.String(length=16), nullable=False),
    sa.Column('pkt_size', sa.Integer(), nullable=False),
    sa.Column('flows', sa.Integer(), nullable=False),
    sa.Column('routes', sa.String(length=1024), nullable=False),
    sa.Column('packets', sa.BigInteger(), nullable=False),
    sa.Column('warmup', sa.BigInteger(), nullable=False),
    sa.Column('backend', sa.String(length=8), nullable=False),
    sa.Column('repetitions', sa.Integer(), nullable=False),
    sa.Column('enabled', sa.Boolean(), nullable=False),
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_bench_configs')),
    sa.UniqueConstraint('name', name=op.f('uq_bench_configs_name'))
    )
    op.create_table('machines',
    sa.Column('fingerprint', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('details', sa.JSON(), nullable=False),
    sa.Column('enabled', sa.Boolean(), nullable=False),
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_machines')),
    sa.UniqueConstraint('fingerprint', name=op.f('uq_machines_fingerprint'))
    )
    op.create_table('repositories',
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('forge', sa.String(length=16), nullable=False),
    sa.Column('clone_url', sa.String(length=1024), nullable=False),
    sa.Column('webhook_secret', sa.String(length=255), nullable=False),
    sa.Column('track_tags', sa.Boolean(), nullable=False),
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_repositories')),
    sa.UniqueConstraint('name', name=op.f('uq_repositories_name'))
    )
    op.create_table('agents',
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('machine_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('backends', sa.JSON(), nullable=False),
    sa.Column('version', sa.String(length=64), nullable=False),
    sa.Column('last_seen_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['machine_id'], ['machines.id'], name=op.f('fk_agents_machine_id_machines'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_agents')),
    sa.UniqueConstraint('token_hash', name=op.f('uq_agents_token_hash'))
    )
    op.create_index(op.f('ix_agents_machine_id'), 'agents', ['machine_id'], unique=False)
    op.create_table('branches',
    sa.Column('repository_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('head_sha', sa.String(length=40), nullable=True),
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['repository_id'], ['repositories.id'], name=op.f('fk_branches_repository_id_repositories'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_branches')),
    sa.UniqueConstraint('repository_id', 'name', name=op.f('uq_branches_repository_id_name'))
    )
    op.create_table('commits',
    sa.Column('repository_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('sha', sa.String(length=40), nullable=False),
    sa.Column('parents', sa.JSON(), nullable=False),
    sa.Column('author_name', sa.String(length=255), nullable=False),
    sa.Column('author_email', sa.String(length=255), nullable=False),
    sa.Column('committed_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['repository_id'], ['repositories.id'], name=op.f('fk_commits_repository_id_repositories'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_commits')),
    sa.UniqueConstraint('repository_id', 'sha', name=op.f('uq_commits_repository_id_sha'))
    )
    op.create_table('webhook_deliveries',
    sa.Column('forge', sa.String(length=16), nullable=False),
    sa.Column('delivery_id', sa.String(length=128), nullable=False),
    sa.Column('event', sa.String(length=64), nullable=False),
    sa.Column('repository_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('ref', sa.String(length=255), nullable=True),
    sa.Column('outcome', sa.String(length=255), nullable=False),
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['repository_id'], ['repositories.id'], name=op.f('fk_webhook_deliveries_repository_id_repositories'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_webhook_deliveries')),
    sa.UniqueConstraint('forge', 'delivery_id', name=op.f('uq_webhook_deliveries_forge_delivery_id'))
    )
    op.create_index(op.f('ix_webhook_deliveries_repository_id'), 'webhook_deliveries', ['repository_id'], unique=False)
    op.create_table('branch_commits',
    sa.Column('branch_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('commit_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['branch_id'], ['branches.id'], name=op.f('fk_branch_commits_branch_id_branches'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['commit_id'], ['commits.id'], name=op.f('fk_branch_commits_commit_id_commits'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('branch_id', 'commit_id', name=op.f('pk_branch_commits')),
    sa.UniqueConstraint('branch_id', 'position', name=op.f('uq_branch_commits_branch_id_position'))
    )
    op.create_index('ix_branch_commits_commit_id', 'branch_commits', ['commit_id'], unique=False)
    op.create_table('enrollment_tokens',
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('note', sa.String(length=255), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('used_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('agent_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['agent_id'], ['agents.id'], name=op.f('fk_enrollment_tokens_agent_id_agents'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_enrollment_tokens')),
    sa.UniqueConstraint('token_hash', name=op.f('uq_enrollment_tokens_token_hash'))
    )
    op.create_table('jobs',
    sa.Column('commit_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('machine_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('config_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('max_attempts', sa.Integer(), nullable=False),
    sa.Column('agent_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("state IN ('queued', 'leased', 'running', 'done', 'failed')", name=op.f('ck_jobs_state')),
    sa.CheckConstraint('attempts <= max_attempts', name=op.f('ck_jobs_attempts')),
    sa.ForeignKeyConstraint(['agent_id'], ['agents.id'], name=op.f('fk_jobs_agent_id_agents'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['commit_id'], ['commits.id'], name=op.f('fk_jobs_commit_id_commits'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['config_id'], ['bench_configs.id'], name=op.f('fk_jobs_config_id_bench_configs'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['machine_id'], ['machines.id'], name=op.f('fk_jobs_machine_id_machines'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_jobs')),
    sa.UniqueConstraint('commit_id', 'machine_id', 'config_id', name=op.f('uq_jobs_commit_id_machine_id_config_id'))
    )
    op.create_index('ix_jobs_machine_id_state_id', 'jobs', ['machine_id', 'state', 'id'], unique=False)
    op.create_index('ix_jobs_state_lease_expires_at', 'jobs', ['state', 'lease_expires_at'], unique=False)
    op.create_table('runs',
    sa.Column('job_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('agent_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('log_tail', sa.Text(), nullable=True),
    sa.Column('backend', sa.String(length=8), nullable=True),
    sa.Column('backend_reason', sa.Text(), nullable=False),
    sa.Column('build_id', sa.String(length=200), nullable=True),
    sa.Column('tuning', sa.JSON(), nullable=True),
    sa.Column('document_sha256', sa.String(length=64), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('received_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['agent_id'], ['agents.id'], name=op.f('fk_runs_agent_id_agents'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_runs_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_runs')),
    sa.UniqueConstraint('job_id', 'attempt', name=op.f('uq_runs_job_id_attempt'))
    )
    op.create_index('uq_runs_job_id_ok', 'runs', ['job_id'], unique=True, postgresql_where=sa.text("status = 'ok'"), sqlite_where=sa.text("status = 'ok'"))
    op.create_table('samples',
    sa.Column('run_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('rep', sa.Integer(), nullable=False),
    sa.Column('raw', sa.JSON(), nullable=False),
    sa.Column('running_pct', sa.JSON(), nullable=False),
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_samples_run_id_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_samples')),
    sa.UniqueConstraint('run_id', 'rep', name=op.f('uq_samples_run_id_rep'))
    )
    op.create_table('metric_values',
    sa.Column('sample_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('run_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('commit_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('machine_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('config_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('rep', sa.Integer(), nullable=False),
    sa.Column('metric', sa.String(length=64), nullable=False),
    sa.Column('backend', sa.String(length=8), nullable=False),
    sa.Column('value', sa.Double(), nullable=False),
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.ForeignKeyConstraint(['commit_id'], ['commits.id'], name=op.f('fk_metric_values_commit_id_commits'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['config_id'], ['bench_configs.id'], name=op.f('fk_metric_values_config_id_bench_configs'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['machine_id'], ['machines.id'], name=op.f('fk_metric_values_machine_id_machines'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_metric_values_run_id_runs'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['sample_id'], ['samples.id'], name=op.f('fk_metric_values_sample_id_samples'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_metric_values')),
    sa.UniqueConstraint('sample_id', 'metric', 'backend', name=op.f('uq_metric_values_sample_id_metric_backend'))
    )
    op.create_index('ix_metric_values_run_id', 'metric_values', ['run_id'], unique=False)
    op.create_index('ix_metric_values_series', 'metric_values', ['machine_id', 'config_id', 'metric', 'backend', 'commit_id'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_metric_values_series', table_name='metric_values')
    op.drop_index('ix_metric_values_run_id', table_name='metric_values')
    op.drop_table('metric_values')
    op.drop_table('samples')
    op.drop_index('uq_runs_job_id_ok', table_name='runs', postgresql_where=sa.text("status = 'ok'"), sqlite_where=sa.text("status = 'ok'"))
    op.drop_table('runs')
    op.drop_index('ix_jobs_state_lease_expires_at', table_name='jobs')
    op.drop_index('ix_jobs_machine_id_state_id', table_name='jobs')
    op.drop_table('jobs')
    op.drop_table('enrollment_tokens')
    op.drop_index('ix_branch_commits_commit_id', table_name='branch_commits')
    op.drop_table('branch_commits')
    op.drop_index(op.f('ix_webhook_deliveries_repository_id'), table_name='webhook_deliveries')
    op.drop_table('webhook_deliveries')
    op.drop_table('commits')
    op.drop_table('branches')
    op.drop_index(op.f('ix_agents_machine_id'), table_name='agents')
    op.drop_table('agents')
    op.drop_table('repositories')
    op.drop_table('machines')
    op.drop_table('bench_configs')
    op.drop_table('api_tokens')
