"""commit statuses gain the ``pending`` verdict: a commit a suspected change names while its
confirmation rounds run (the CI gate's ``pending``, posted to the forge as well)

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25 14:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("commit_statuses") as batch:
        batch.drop_constraint(op.f("ck_commit_statuses_state"), type_="check")
        batch.create_check_constraint(op.f("ck_commit_statuses_state"), "state IN ('success', 'failure', 'pending')")


def downgrade() -> None:
    # A pending verdict has no place in the old states: the next detection writes it again as success.
    op.execute("UPDATE commit_statuses SET state = 'success', version = version + 1 WHERE state = 'pending'")
    with op.batch_alter_table("commit_statuses") as batch:
        batch.drop_constraint(op.f("ck_commit_statuses_state"), type_="check")
        batch.create_check_constraint(op.f("ck_commit_statuses_state"), "state IN ('success', 'failure')")
