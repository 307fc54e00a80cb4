"""a read-only role for Grafana: SELECT on the dash_* views, nothing else

Grafana reads with the role named by PERFCI_GRAFANA_DB_USER (default perfci_grafana). It may
SELECT the dash_* views and nothing else: not the tables behind them (repositories hold webhook
secrets, machines their fingerprints), and it cannot write. The views run with their owner's
rights, so the grants on the views are all it needs. Its sessions are read-only by default and
read backslashes in string literals literally (Grafana's ${var:sqlstring} quoting relies on it).

The views added here are what the dashboards' variables and joins used to read from the tables:
branches, machines and configs by name, and the backends measured per machine x config.

The role is cluster-wide: created NOLOGIN when missing (which needs CREATEROLE; a deployment
whose schema owner lacks it creates the role first as a superuser, as the Ansible role does),
never dropped on downgrade (other databases of the cluster may grant it too). Its password is
set by `perfci admin migrate` from PERFCI_GRAFANA_DB_PASSWORD (server/perfci_server/migrate.py),
so a new password takes effect on the next migrate. A later migration that adds a dash_* view
grants it with grant_dashboard_views().

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 21:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from perfci_server.settings import get_settings

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

VIEWS: dict[str, str] = {
    "dash_branches": """
        SELECT b.id AS branch_id, b.repository_id, r.name AS repository, b.name AS branch
        FROM branches b JOIN repositories r ON r.id = b.repository_id
    """,
    "dash_machines": "SELECT id AS machine_id, name, enabled FROM machines",
    "dash_configs": "SELECT id AS config_id, name, enabled FROM bench_configs",
    # A filter on machine and config is pushed into the DISTINCT (ix_metric_values_series).
    "dash_series_backends": "SELECT DISTINCT machine_id, config_id, backend FROM metric_values",
}

# Role name and settings travel as parameters (set_config), never spliced into SQL text.
_ENSURE_ROLE = """
DO $$
DECLARE
    reader text := current_setting('perfci.dashboard_role');
    can_create boolean := (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user);
    wanted text[] := ARRAY['default_transaction_read_only=on', 'standard_conforming_strings=on'];
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = reader) THEN
        IF NOT can_create THEN
            RAISE EXCEPTION 'role "%" does not exist and "%" may not create roles', reader, current_user
                USING HINT = format('as a superuser: CREATE ROLE %I LOGIN PASSWORD ''...'', or grant %I CREATEROLE',
                                    reader, current_user);
        END IF;
        BEGIN
            EXECUTE format('CREATE ROLE %I NOLOGIN', reader);
        EXCEPTION WHEN duplicate_object THEN NULL;  -- another database's migration made it meanwhile
        END;
    END IF;
    -- A role's settings are one row for the whole cluster: databases migrated at once race on it.
    -- The loser's ALTER waits for the winner's commit and fails (a concurrent update, or a duplicate
    -- key on the first insert); the settings it wanted are then there, and it goes on.
    IF can_create AND NOT EXISTS (SELECT FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole
                                  WHERE r.rolname = reader AND s.setdatabase = 0 AND s.setconfig @> wanted) THEN
        BEGIN
            EXECUTE format('ALTER ROLE %I SET default_transaction_read_only = on', reader);
            EXECUTE format('ALTER ROLE %I SET standard_conforming_strings = on', reader);
        EXCEPTION WHEN internal_error OR unique_violation THEN
            IF NOT EXISTS (SELECT FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole
                           WHERE r.rolname = reader AND s.setdatabase = 0 AND s.setconfig @> wanted) THEN
                RAISE;
            END IF;
        END;
    END IF;
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO %I', current_database(), reader);
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), reader);
END
$$
"""

_GRANT_VIEWS = """
DO $$
DECLARE
    view_name text;
BEGIN
    FOR view_name IN SELECT viewname FROM pg_views WHERE schemaname = current_schema() AND viewname LIKE 'dash\\_%' LOOP
        EXECUTE format('GRANT SELECT ON %I TO %I', view_name, current_setting('perfci.dashboard_role'));
    END LOOP;
END
$$
"""


def _set_role_parameter() -> None:
    op.get_bind().execute(sa.text("SELECT set_config('perfci.dashboard_role', :role, true)"),
                          {"role": get_settings().grafana_db_user})


def grant_dashboard_views() -> None:
    """SELECT on every dash_* view of the schema to the dashboard role."""
    _set_role_parameter()
    op.execute(_GRANT_VIEWS)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name, body in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {body}")
    _set_role_parameter()
    op.execute(_ENSURE_ROLE)
    grant_dashboard_views()


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _set_role_parameter()
    op.execute("""
        DO $$
        DECLARE
            reader text := current_setting('perfci.dashboard_role');
        BEGIN
            IF EXISTS (SELECT FROM pg_roles WHERE rolname = reader) THEN
                EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA %I FROM %I', current_schema(), reader);
                EXECUTE format('REVOKE USAGE ON SCHEMA %I FROM %I', current_schema(), reader);
                EXECUTE format('REVOKE CONNECT ON DATABASE %I FROM %I', current_database(), reader);
            END IF;
        END
        $$
    """)
    for name in reversed(VIEWS):
        op.execute(f"DROP VIEW IF EXISTS {name}")
