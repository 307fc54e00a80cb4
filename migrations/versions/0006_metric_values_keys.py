"""metric_values: keyed by (sample, metric, backend); no checks on the denormalised copies

Every upload inserts ~100 metric values, and each index and foreign key costs per row. The row's
identity is its sample, metric and backend (that was already a unique constraint), so it becomes
the primary key and the surrogate id (a sequence call per row) goes. The run, commit, machine and
config columns are copies of the sample's run's job, written by the one statement that stores a
result (results.repository.store_result) from the locked job row: the sample's foreign key alone
ties a value to its run and carries every delete (commit/machine/config -> job -> run -> sample ->
value), so the four foreign keys on the copies only re-checked what that statement already knows,
at four index lookups per value. The run_id index stays: dashboards reach a run's values by it.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-21 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COPIES = {
    "run_id": ("runs", "fk_metric_values_run_id_runs"),
    "commit_id": ("commits", "fk_metric_values_commit_id_commits"),
    "machine_id": ("machines", "fk_metric_values_machine_id_machines"),
    "config_id": ("bench_configs", "fk_metric_values_config_id_bench_configs"),
}
_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("metric_values", recreate="auto") as batch:
        for _, name in _COPIES.values():
            batch.drop_constraint(name, type_="foreignkey")
        batch.drop_constraint("uq_metric_values_sample_id_metric_backend", type_="unique")
        batch.drop_constraint("pk_metric_values", type_="primary")
        batch.drop_column("id")
        batch.create_primary_key("pk_metric_values", ["sample_id", "metric", "backend"])


def downgrade() -> None:
    with op.batch_alter_table("metric_values", recreate="auto") as batch:
        batch.drop_constraint("pk_metric_values", type_="primary")
        batch.add_column(sa.Column("id", _BIG_ID, sa.Identity() if op.get_bind().dialect.name == "postgresql" else None, nullable=False))
        batch.create_primary_key("pk_metric_values", ["id"])
        batch.create_unique_constraint("uq_metric_values_sample_id_metric_backend", ["sample_id", "metric", "backend"])
        for column, (table, name) in _COPIES.items():
            batch.create_foreign_key(name, table, [column], ["id"], ondelete="CASCADE")
