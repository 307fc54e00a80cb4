"""bisects (server-orchestrated bisection)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21 06:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass  # the bisect tables are added here together with their models


def downgrade() -> None:
    pass
