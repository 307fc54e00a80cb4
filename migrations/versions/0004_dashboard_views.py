"""dashboard views (Grafana reads these; PostgreSQL only)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21 07:10:00

Views keep the panel SQL of `dashboards/` short. They are plain (not materialized) views: filters
on their grouping / partition columns (branch, machine, config, metric, backend) are pushed down
by PostgreSQL into the aggregates, so a panel reads one range of `ix_metric_values_series`.

`plot_time` is how the dashboards draw commit order on Grafana's time axis: the latest commit
time so far along the branch (a running max over branch positions) plus `position` milliseconds.
It is strictly increasing along the branch, so points are drawn in commit order even when a
rebased or merged commit carries an older date than its predecessor; it equals the commit time
except for such commits (drawn just after their predecessor) and the sub-second offset.

SQLite (the embedded default) has no dashboards and no percentile_cont: nothing is created there.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The forge's web page of a commit, from the clone URL: drop ".git" and credentials, turn
# scp-like / ssh URLs into https; GitLab puts commits under /-/commit/.
_COMMIT_URL = r"""
    regexp_replace(
        regexp_replace(
            regexp_replace(r.clone_url, '\.git/?$', ''),
            '^(https?://)[^@/]+@', '\1'),
        '^(ssh://)?[^@/:]+@([^:/]+)[:/]', 'https://\2/')
    || CASE r.forge WHEN 'gitlab' THEN '/-/commit/' ELSE '/commit/' END
    || c.sha
"""

VIEWS: dict[str, str] = {
    # One row per commit on a branch: its order, where it is drawn, how to open it.
    "dash_branch_commits": f"""
        SELECT bc.branch_id, b.repository_id, r.name AS repository, b.name AS branch,
               bc.position, c.id AS commit_id, c.sha, left(c.sha, 12) AS short_sha,
               split_part(c.message, E'\\n', 1) AS subject, c.author_name AS author,
               c.committed_at,
               max(coalesce(c.committed_at, c.created_at)) OVER (
                   PARTITION BY bc.branch_id ORDER BY bc.position ROWS UNBOUNDED PRECEDING)
               + bc.position * interval '1 millisecond' AS plot_time,
               {_COMMIT_URL} AS commit_url
        FROM branch_commits bc
        JOIN branches b ON b.id = bc.branch_id
        JOIN repositories r ON r.id = b.repository_id
        JOIN commits c ON c.id = bc.commit_id
    """,
    # The spread of one metric's repetitions at one commit on one machine x config.
    "dash_commit_stats": """
        SELECT commit_id, machine_id, config_id, metric, backend,
               count(*) AS reps, min(value) AS min,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY value) AS median,
               max(value) AS max
        FROM metric_values
        GROUP BY commit_id, machine_id, config_id, metric, backend
    """,
    # A series point: the above placed on a branch, with readable names.
    "dash_series_points": """
        SELECT bcm.branch_id, bcm.repository_id, bcm.repository, bcm.branch, bcm.position,
               bcm.commit_id, bcm.sha, bcm.short_sha, bcm.subject, bcm.author, bcm.committed_at,
               bcm.plot_time, bcm.commit_url,
               s.machine_id, m.name AS machine, s.config_id, cfg.name AS config,
               s.metric, s.backend, s.reps, s.min, s.median, s.max
        FROM dash_commit_stats s
        JOIN dash_branch_commits bcm ON bcm.commit_id = s.commit_id
        JOIN machines m ON m.id = s.machine_id
        JOIN bench_configs cfg ON cfg.id = s.config_id
    """,
    # The commit medians of the newest 50 commits of each branch, for "latest" panels. Reached
    # through the jobs/runs indexes (commit -> job -> run -> values), so a latest-value panel over
    # every machine and config reads only those commits instead of each series' whole history.
    "dash_recent_points": """
        SELECT b.id AS branch_id, recent.position, recent.commit_id, recent.plot_time,
               mv.machine_id, mv.config_id, mv.metric, mv.backend,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY mv.value) AS median
        FROM branches b
        CROSS JOIN LATERAL (  -- LIMIT, not row_number(): the planner then knows it is 50 rows
            SELECT bc.position, bc.commit_id,
                   max(coalesce(c.committed_at, c.created_at)) OVER (ORDER BY bc.position ROWS UNBOUNDED PRECEDING)
                   + bc.position * interval '1 millisecond' AS plot_time
            FROM branch_commits bc JOIN commits c ON c.id = bc.commit_id
            WHERE bc.branch_id = b.id ORDER BY bc.position DESC LIMIT 50
        ) recent
        JOIN jobs j ON j.commit_id = recent.commit_id
        JOIN runs r ON r.job_id = j.id AND r.status = 'ok'
        JOIN metric_values mv ON mv.run_id = r.id
        GROUP BY b.id, recent.position, recent.commit_id, recent.plot_time, mv.machine_id, mv.config_id, mv.metric, mv.backend
    """,
    # Each series' latest commit (among the newest 50 of the branch) against its baseline: the
    # median of the commit medians of the ten measured commits before it (robust to one noisy
    # commit, recent enough to matter). A series not measured in those 50 commits is stale and
    # not listed.
    "dash_series_changes": f"""
        WITH ranked AS (
            SELECT p.*, row_number() OVER (
                PARTITION BY branch_id, machine_id, config_id, metric, backend
                ORDER BY position DESC) AS recency
            FROM dash_recent_points p
        ), changes AS (
            SELECT branch_id, machine_id, config_id, metric, backend,
                   max(position) AS position,
                   max(commit_id) FILTER (WHERE recency = 1) AS commit_id,
                   max(median) FILTER (WHERE recency = 1) AS latest,
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY median) FILTER (WHERE recency BETWEEN 2 AND 11) AS baseline,
                   count(*) FILTER (WHERE recency BETWEEN 2 AND 11) AS baseline_commits
            FROM ranked
            WHERE recency <= 11
            GROUP BY branch_id, machine_id, config_id, metric, backend
        )
        SELECT ch.branch_id, r.name AS repository, b.name AS branch, ch.machine_id, m.name AS machine, ch.config_id,
               cfg.name AS config, ch.metric, ch.backend, ch.position, left(c.sha, 12) AS short_sha,
               {_COMMIT_URL} AS commit_url,
               ch.latest, ch.baseline, ch.baseline_commits
        FROM changes ch
        JOIN commits c ON c.id = ch.commit_id
        JOIN repositories r ON r.id = c.repository_id
        JOIN branches b ON b.id = ch.branch_id
        JOIN machines m ON m.id = ch.machine_id
        JOIN bench_configs cfg ON cfg.id = ch.config_id
    """,
    # One row per alert group: its range, the metrics that moved, the explanation.
    "dash_alert_groups": """
        SELECT g.id, g.status, g.direction, g.repository_id, r.name AS repository, g.branch_id,
               b.name AS branch, g.machine_id, m.name AS machine,
               lg.position AS last_good_position, lg.short_sha AS last_good_sha,
               fb.position AS first_bad_position, fb.short_sha AS first_bad_sha,
               fb.subject AS first_bad_subject, fb.author AS first_bad_author,
               fb.commit_url AS first_bad_url, fb.plot_time AS first_bad_time,
               coalesce((SELECT string_agg(
                                    format('%s %s/%s %s%s%%', cfg.name, a.metric, a.backend,
                                           CASE WHEN a.change_pct >= 0 THEN '+' ELSE '' END,
                                           round(a.change_pct::numeric, 2)),
                                    ', ' ORDER BY abs(a.change_pct) DESC)
                         FROM alerts a JOIN bench_configs cfg ON cfg.id = a.config_id
                         WHERE a.group_id = g.id), '') AS metrics,
               (SELECT count(*) FROM alerts a WHERE a.group_id = g.id) AS alert_count,
               g.summary, g.explanation::text AS explanation,
               g.triage_note, g.triaged_by, g.created_at, g.updated_at
        FROM alert_groups g
        JOIN repositories r ON r.id = g.repository_id
        JOIN branches b ON b.id = g.branch_id
        JOIN machines m ON m.id = g.machine_id
        JOIN dash_branch_commits fb ON fb.branch_id = g.branch_id AND fb.commit_id = g.first_bad_commit_id
        LEFT JOIN dash_branch_commits lg ON lg.branch_id = g.branch_id AND lg.commit_id = g.last_good_commit_id
    """,
    # One row per moved metric, placed at its first bad commit (the trend dashboard's annotations).
    "dash_alert_marks": """
        SELECT a.id, a.group_id, g.status, a.direction, g.branch_id, g.machine_id, a.config_id,
               a.metric, a.backend, a.before_median, a.after_median, a.change_pct,
               fb.position AS first_bad_position, fb.short_sha AS first_bad_sha, fb.plot_time,
               g.summary
        FROM alerts a
        JOIN alert_groups g ON g.id = a.group_id
        JOIN dash_branch_commits fb ON fb.branch_id = g.branch_id AND fb.commit_id = a.first_bad_commit_id
    """,
}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name, body in VIEWS.items():  # dict order: each view only uses the ones before it
        op.execute(f"CREATE VIEW {name} AS {body}")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name in reversed(VIEWS):
        op.execute(f"DROP VIEW IF EXISTS {name}")
