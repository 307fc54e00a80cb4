"""pushes: each push to a branch, and whether all its commits are recorded

Forges list at most 20 commits in a push payload; the server now records every first-parent commit
of before..after from its own mirror of the repository. A push whose mirror could not be fetched
keeps what the payload listed and stays incomplete (partial index: the retry sweep's work list)
until beat fetches the rest.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 21:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_INCOMPLETE = "NOT complete"


def upgrade() -> None:
    op.create_table(
        "pushes",
        sa.Column("repository_id", _BIG_ID, nullable=False),
        sa.Column("branch_id", _BIG_ID, nullable=False),
        sa.Column("delivery_id", _BIG_ID, nullable=True),
        sa.Column("before", sa.String(length=40), nullable=True),
        sa.Column("after", sa.String(length=40), nullable=False),
        sa.Column("listed_commits", sa.Integer(), nullable=False),
        sa.Column("recorded_commits", sa.Integer(), nullable=False),
        sa.Column("complete", sa.Boolean(), nullable=False),
        sa.Column("fetch_attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("id", _BIG_ID, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["branch_id"], ["branches.id"], name=op.f("fk_pushes_branch_id_branches"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["delivery_id"], ["webhook_deliveries.id"], name=op.f("fk_pushes_delivery_id_webhook_deliveries"), ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["repository_id"], ["repositories.id"], name=op.f("fk_pushes_repository_id_repositories"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pushes")),
    )
    op.create_index(op.f("ix_pushes_repository_id"), "pushes", ["repository_id"], unique=False)
    op.create_index("ix_pushes_incomplete", "pushes", ["id"], unique=False,
                    postgresql_where=sa.text(_INCOMPLETE), sqlite_where=sa.text(_INCOMPLETE))


def downgrade() -> None:
    op.drop_index("ix_pushes_incomplete", table_name="pushes", postgresql_where=sa.text(_INCOMPLETE), sqlite_where=sa.text(_INCOMPLETE))
    op.drop_index(op.f("ix_pushes_repository_id"), table_name="pushes")
    op.drop_table("pushes")
