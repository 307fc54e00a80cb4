"""indexes for /metrics: each forge's webhook deliveries by arrival, pull requests by their last
change and those whose comment is not sent yet; a scrape counts the last hour and what waits
through them instead of reading whole tables

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COMMENT_UNSENT = "comment_version > 0 AND comment_version <> coalesce(comment_sent_version, 0)"


def upgrade() -> None:
    op.create_index("ix_webhook_deliveries_forge_created_at", "webhook_deliveries", ["forge", "created_at"])
    op.create_index("ix_pull_requests_updated_at", "pull_requests", ["updated_at"])
    op.create_index("ix_pull_requests_comment_unsent", "pull_requests", ["id"], postgresql_where=sa.text(COMMENT_UNSENT),
                    sqlite_where=sa.text(COMMENT_UNSENT))


def downgrade() -> None:
    op.drop_index("ix_pull_requests_comment_unsent", table_name="pull_requests")
    op.drop_index("ix_pull_requests_updated_at", table_name="pull_requests")
    op.drop_index("ix_webhook_deliveries_forge_created_at", table_name="webhook_deliveries")
