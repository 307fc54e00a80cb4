"""branches judged against their base, pull requests, neutral verdicts and their public pages

- agents.stopped_claiming: why an agent stopped claiming jobs (its host's identity changed), from
  its heartbeat.
- abandoned_commits: the commits a force push took off a branch (kept, out of its series).
- pushes.listed_shas: the payload's commits, placed on the branch only while the mirror cannot be
  fetched (a webhook is answered before any fetch; a task records the push's range from git).
- repositories.default_branch: the base of every other branch unless a pull request names one.
- branches.base_branch_id, fork_position: a branch starts with its base's history up to the
  merge-base (positions 0 .. fork_position), then its own commits.
- pull_requests: one row per pull/merge request, its head, merge-base and the one forge comment.
- jobs.pull_request_id and the purposes 'pull' (a pull request's side) and 'backfill' (history
  measured for a machine or config that joined late).
- commit_statuses: scope ('series' | 'pull', unique with commit x machine), state 'neutral' (no
  verdict: never success by absence), public_id (the unguessable id of its read-only page).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26 11:00:00
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("stopped_claiming", sa.Text(), nullable=True))
    with op.batch_alter_table("pushes") as batch:
        batch.add_column(sa.Column("listed_shas", sa.JSON(), nullable=False, server_default="[]"))
    with op.batch_alter_table("repositories") as batch:
        batch.add_column(sa.Column("default_branch", sa.String(255), nullable=False, server_default="main"))
    with op.batch_alter_table("branches") as batch:
        batch.add_column(sa.Column("base_branch_id", ID, nullable=True))
        batch.add_column(sa.Column("fork_position", sa.Integer(), nullable=True))
        batch.create_foreign_key(op.f("fk_branches_base_branch_id_branches"), "branches", ["base_branch_id"], ["id"],
                                 ondelete="SET NULL")

    op.create_table(
        "abandoned_commits",
        sa.Column("branch_id", ID, sa.ForeignKey("branches.id", ondelete="CASCADE", name=op.f("fk_abandoned_commits_branch_id_branches")),
                  nullable=False),
        sa.Column("commit_id", ID, sa.ForeignKey("commits.id", ondelete="CASCADE", name=op.f("fk_abandoned_commits_commit_id_commits")),
                  nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("push_id", ID, sa.ForeignKey("pushes.id", ondelete="SET NULL", name=op.f("fk_abandoned_commits_push_id_pushes")),
                  nullable=True),
        sa.Column("abandoned_at", WHEN, nullable=False),
        sa.PrimaryKeyConstraint("branch_id", "commit_id", name=op.f("pk_abandoned_commits")),
    )
    op.create_table(
        "pull_requests",
        sa.Column("id", ID, primary_key=True),
        sa.Column("repository_id", ID, sa.ForeignKey("repositories.id", ondelete="CASCADE",
                                                     name=op.f("fk_pull_requests_repository_id_repositories")), nullable=False),
        sa.Column("number", ID, nullable=False),
        sa.Column("title", sa.String(255), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("base_branch", sa.String(255), nullable=False),
        sa.Column("head_branch", sa.String(255), nullable=False),
        sa.Column("head_sha", sa.String(40), nullable=False),
        sa.Column("base_sha", sa.String(40), nullable=True),
        sa.Column("head_commit_id", ID, sa.ForeignKey("commits.id", ondelete="SET NULL",
                                                      name=op.f("fk_pull_requests_head_commit_id_commits")), nullable=True),
        sa.Column("base_commit_id", ID, sa.ForeignKey("commits.id", ondelete="SET NULL",
                                                      name=op.f("fk_pull_requests_base_commit_id_commits")), nullable=True),
        sa.Column("waiting_for", sa.Text(), nullable=False),
        sa.Column("comment_id", sa.String(64), nullable=True),
        sa.Column("comment_body", sa.Text(), nullable=False),
        sa.Column("comment_version", sa.Integer(), nullable=False),
        sa.Column("comment_sent_version", sa.Integer(), nullable=True),
        sa.Column("comment_error", sa.Text(), nullable=False),
        sa.Column("public_id", sa.String(32), nullable=False),
        sa.Column("updated_at", WHEN, nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pull_requests")),
        sa.UniqueConstraint("repository_id", "number", name=op.f("uq_pull_requests_repository_id_number")),
        sa.UniqueConstraint("public_id", name=op.f("uq_pull_requests_public_id")),
        sa.CheckConstraint("state IN ('open', 'closed')", name=op.f("ck_pull_requests_state")),
    )

    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("pull_request_id", ID, nullable=True))
        batch.create_foreign_key(op.f("fk_jobs_pull_request_id_pull_requests"), "pull_requests", ["pull_request_id"], ["id"],
                                 ondelete="SET NULL")
        batch.create_index(op.f("ix_jobs_pull_request_id"), ["pull_request_id"])
        batch.drop_constraint(op.f("ck_jobs_purpose"), type_="check")
        batch.create_check_constraint(op.f("ck_jobs_purpose"), "purpose IN ('push', 'bisect', 'confirm', 'pull', 'backfill')")

    with op.batch_alter_table("commit_statuses") as batch:
        batch.add_column(sa.Column("scope", sa.String(16), nullable=False, server_default="series"))
        batch.add_column(sa.Column("public_id", sa.String(32), nullable=True))
    statuses = sa.table("commit_statuses", sa.column("id", ID), sa.column("public_id", sa.String(32)))
    connection = op.get_bind()
    for (status_id,) in connection.execute(sa.select(statuses.c.id)).all():
        connection.execute(statuses.update().where(statuses.c.id == status_id).values(public_id=secrets.token_urlsafe(16)))
    with op.batch_alter_table("commit_statuses") as batch:
        batch.alter_column("public_id", existing_type=sa.String(32), nullable=False)
        batch.create_unique_constraint(op.f("uq_commit_statuses_public_id"), ["public_id"])
        batch.drop_constraint(op.f("uq_commit_statuses_commit_id_machine_id"), type_="unique")
        batch.create_unique_constraint(op.f("uq_commit_statuses_commit_id_machine_id_scope"), ["commit_id", "machine_id", "scope"])
        batch.drop_constraint(op.f("ck_commit_statuses_state"), type_="check")
        batch.create_check_constraint(op.f("ck_commit_statuses_state"), "state IN ('success', 'failure', 'pending', 'neutral')")
        batch.create_check_constraint(op.f("ck_commit_statuses_scope"), "scope IN ('series', 'pull')")


def downgrade() -> None:
    op.execute("DELETE FROM commit_statuses WHERE scope <> 'series'")
    op.execute("UPDATE commit_statuses SET state = 'pending' WHERE state = 'neutral'")
    with op.batch_alter_table("commit_statuses") as batch:
        batch.drop_constraint(op.f("ck_commit_statuses_scope"), type_="check")
        batch.drop_constraint(op.f("ck_commit_statuses_state"), type_="check")
        batch.create_check_constraint(op.f("ck_commit_statuses_state"), "state IN ('success', 'failure', 'pending')")
        batch.drop_constraint(op.f("uq_commit_statuses_commit_id_machine_id_scope"), type_="unique")
        batch.create_unique_constraint(op.f("uq_commit_statuses_commit_id_machine_id"), ["commit_id", "machine_id"])
        batch.drop_constraint(op.f("uq_commit_statuses_public_id"), type_="unique")
        batch.drop_column("public_id")
        batch.drop_column("scope")
    op.execute("DELETE FROM jobs WHERE purpose IN ('pull', 'backfill')")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint(op.f("ck_jobs_purpose"), type_="check")
        batch.create_check_constraint(op.f("ck_jobs_purpose"), "purpose IN ('push', 'bisect', 'confirm')")
        batch.drop_index(op.f("ix_jobs_pull_request_id"))
        batch.drop_constraint(op.f("fk_jobs_pull_request_id_pull_requests"), type_="foreignkey")
        batch.drop_column("pull_request_id")
    op.drop_table("pull_requests")
    op.drop_table("abandoned_commits")
    with op.batch_alter_table("branches") as batch:
        batch.drop_constraint(op.f("fk_branches_base_branch_id_branches"), type_="foreignkey")
        batch.drop_column("fork_position")
        batch.drop_column("base_branch_id")
    with op.batch_alter_table("repositories") as batch:
        batch.drop_column("default_branch")
    with op.batch_alter_table("pushes") as batch:
        batch.drop_column("listed_shas")
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("stopped_claiming")
