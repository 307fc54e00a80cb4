"""every workflow's check mark: a pull request's verdict per base, merged pull requests, and whose
change an alert is

- commit_statuses.base_branch, pull_request_id: a pull request's verdict is kept per base branch
  (unique with commit x machine x scope), so two pull requests that share a head keep their own
  verdicts, contexts and pages.
- pull_requests.state 'merged' (a merged pull request ends what was pending, saying so).
- alert_groups.origin_commit_id, origin_group_id: a later sighting of a change another commit
  carries first (a merge's merged-in parent, the original of a cherry-pick or rebase);
  awaiting_commit_id: a merged-in parent whose measurement decides whose change it is.
- commits.patch_id: git's stable patch id (the same change under another sha).
- branch_commits.guessed: placed from a payload's order while the mirror could not be fetched,
  provisional until git's order replaces it.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-28 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("commit_statuses") as batch:
        batch.add_column(sa.Column("base_branch", sa.String(255), nullable=False, server_default=""))
        batch.add_column(sa.Column("pull_request_id", ID, nullable=True))
        batch.create_foreign_key(op.f("fk_commit_statuses_pull_request_id_pull_requests"), "pull_requests",
                                 ["pull_request_id"], ["id"], ondelete="SET NULL")
        batch.drop_constraint(op.f("uq_commit_statuses_commit_id_machine_id_scope"), type_="unique")
        batch.create_unique_constraint(op.f("uq_commit_statuses_commit_id_machine_id_scope_base_branch"),
                                       ["commit_id", "machine_id", "scope", "base_branch"])
    # A pull request's existing verdicts belong to the base it has now.
    op.execute("UPDATE commit_statuses SET base_branch = (SELECT p.base_branch FROM pull_requests p "
               "WHERE p.head_commit_id = commit_statuses.commit_id ORDER BY p.id LIMIT 1), "
               "pull_request_id = (SELECT p.id FROM pull_requests p WHERE p.head_commit_id = commit_statuses.commit_id "
               "ORDER BY p.id LIMIT 1) "
               "WHERE scope = 'pull' AND EXISTS (SELECT 1 FROM pull_requests p WHERE p.head_commit_id = commit_statuses.commit_id)")
    with op.batch_alter_table("pull_requests") as batch:
        batch.drop_constraint(op.f("ck_pull_requests_state"), type_="check")
        batch.create_check_constraint(op.f("ck_pull_requests_state"), "state IN ('open', 'closed', 'merged')")
    with op.batch_alter_table("alert_groups") as batch:
        for column, target in (("origin_commit_id", "commits"), ("origin_group_id", "alert_groups"),
                               ("awaiting_commit_id", "commits")):
            batch.add_column(sa.Column(column, ID, nullable=True))
            batch.create_foreign_key(op.f(f"fk_alert_groups_{column}_{target}"), target, [column], ["id"], ondelete="SET NULL")
    with op.batch_alter_table("commits") as batch:
        batch.add_column(sa.Column("patch_id", sa.String(40), nullable=True))
        batch.create_index(op.f("ix_commits_repository_id_patch_id"), ["repository_id", "patch_id"])
    with op.batch_alter_table("branch_commits") as batch:
        batch.add_column(sa.Column("guessed", sa.Boolean(), nullable=False, server_default=sa.text("false")))


def downgrade() -> None:
    with op.batch_alter_table("branch_commits") as batch:
        batch.drop_column("guessed")
    with op.batch_alter_table("commits") as batch:
        batch.drop_index(op.f("ix_commits_repository_id_patch_id"))
        batch.drop_column("patch_id")
    with op.batch_alter_table("alert_groups") as batch:
        for column, target in (("awaiting_commit_id", "commits"), ("origin_group_id", "alert_groups"),
                               ("origin_commit_id", "commits")):
            batch.drop_constraint(op.f(f"fk_alert_groups_{column}_{target}"), type_="foreignkey")
            batch.drop_column(column)
    op.execute("UPDATE pull_requests SET state = 'closed' WHERE state = 'merged'")
    with op.batch_alter_table("pull_requests") as batch:
        batch.drop_constraint(op.f("ck_pull_requests_state"), type_="check")
        batch.create_check_constraint(op.f("ck_pull_requests_state"), "state IN ('open', 'closed')")
    op.execute("DELETE FROM commit_statuses WHERE scope = 'pull' AND id NOT IN (SELECT min(id) FROM commit_statuses "
               "GROUP BY commit_id, machine_id, scope)")
    with op.batch_alter_table("commit_statuses") as batch:
        batch.drop_constraint(op.f("uq_commit_statuses_commit_id_machine_id_scope_base_branch"), type_="unique")
        batch.create_unique_constraint(op.f("uq_commit_statuses_commit_id_machine_id_scope"), ["commit_id", "machine_id", "scope"])
        batch.drop_constraint(op.f("fk_commit_statuses_pull_request_id_pull_requests"), type_="foreignkey")
        batch.drop_column("pull_request_id")
        batch.drop_column("base_branch")
