"""noisy runs: the agent's mark on a result whose repetitions spread far beyond the machine's usual noise

The mark (spread, threshold and what it is based on, the host's load) is kept as the agent sent it;
detection gives a marked run's commit one value (its median) instead of every repetition, so the
series weighs it less (perfci_core.analysis.noise decides what is noisy).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24 00:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("noisy", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "noisy")
