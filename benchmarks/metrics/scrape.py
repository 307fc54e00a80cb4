"""What one /metrics scrape costs the database as its history grows (metrics.py reads the database
at every scrape: nothing is counted in memory).

    .venv/bin/python benchmarks/metrics/scrape.py [--history 10000,100000,1000000] [--samples 15]

For each history size H, a database of its own (benchmarks/owned.py, ``perfci_bench_metrics``) is
migrated and filled with H finished jobs and their runs, H/2 commit statuses that were sent, H/5
webhook deliveries, H/10 complete pushes and H/100 pull requests with their comment sent — the
history that only grows, a month old — plus the same live work at every size: 200 queued jobs on 4
machines, 8 held, 30 pending statuses, 5 pull requests whose comment waits, 60 deliveries in the
last half hour, 50 runs awaiting detection, 3 incomplete pushes, 20 agents. The tables
are analysed (as autovacuum would), then the scrape (the collector, as the route runs it) is timed
``--samples`` times, and each of its queries once more under EXPLAIN ANALYZE, with its plan's top
node. The premise is checked: the history is in the tables, and the scrape reports the live work.
There is no peer: no other scrape of these figures exists to compare with.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/owned.py

import owned
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, event, text

DEFAULT_DB = owned.default_database_url("metrics")

SEED = """
INSERT INTO machines (fingerprint, name, details, enabled, created_at)
  SELECT md5(g::text) || md5(g::text), 'dut-0' || g, '{{}}', true, now() FROM generate_series(1, 4) g;
INSERT INTO repositories (name, forge, clone_url, webhook_secret, track_tags, default_branch, created_at)
  VALUES ('o/dataplane', 'github', 'https://example.com/d.git', 's', false, 'main', now());
INSERT INTO bench_configs (name, harness, pkt_size, flows, routes, packets, warmup, scaling, backend, repetitions, enabled, created_at)
  VALUES ('sim-64B', 'self', 64, 1024, 'default', 65536, 2000, false, 'sim', 1, true, now());
INSERT INTO branches (repository_id, name, created_at) VALUES (1, 'main', now());
INSERT INTO commits (repository_id, sha, parents, author_name, author_email, message, created_at)
  SELECT 1, md5(g::text) || substr(md5((-g)::text), 1, 8), '[]', '', '', '', now() FROM generate_series(1, {commits}) g;
-- history: finished jobs (on dut-01), one ok run each, detected
INSERT INTO jobs (commit_id, machine_id, config_id, state, attempts, max_attempts, updated_at, purpose, priority, round, reason, created_at)
  SELECT g, 1, 1, 'done', 1, 3, now(), 'push', 0, 0, '', now() - interval '30 days' FROM generate_series(1, {history}) g;
INSERT INTO runs (job_id, attempt, status, backend, backend_reason, received_at, detected_at, created_at)
  SELECT g, 1, 'ok', 'sim', '', now() - interval '30 days', now() - interval '30 days', now() FROM generate_series(1, {history}) g;
INSERT INTO commit_statuses (repository_id, commit_id, machine_id, scope, public_id, state, context, description, version,
                             delivery, sent_version, attempts, last_error, updated_at, created_at)
  SELECT 1, g, 1, 'series', md5(g::text), 'success', 'perfci/dut-01', '', 1, 'sent', 1, 1, '', now() - interval '30 days', now()
  FROM generate_series(1, {history} / 2) g;
INSERT INTO webhook_deliveries (forge, delivery_id, event, repository_id, ref, outcome, created_at)
  SELECT 'github', 'd-' || g, 'push', 1, 'refs/heads/main', 'scheduled: push to main', now() - interval '30 days'
  FROM generate_series(1, {history} / 5) g;
INSERT INTO pushes (repository_id, branch_id, after, listed_commits, listed_shas, recorded_commits, complete, fetch_attempts, created_at)
  SELECT 1, 1, md5(g::text), 1, '[]', 1, true, 1, now() FROM generate_series(1, {history} / 10) g;
INSERT INTO pull_requests (repository_id, number, title, state, base_branch, head_branch, head_sha, waiting_for, comment_body,
                           comment_version, comment_sent_version, comment_error, public_id, updated_at, created_at)
  SELECT 1, g, '', 'closed', 'main', 'f' || g, md5(g::text), '', 'c', 1, 1, '', md5((-g)::text), now() - interval '30 days', now()
  FROM generate_series(1, {history} / 100) g;
-- live work, the same at every size
INSERT INTO jobs (commit_id, machine_id, config_id, state, attempts, max_attempts, updated_at, purpose, priority, round, reason, created_at)
  SELECT {history} + g, 1 + g % 4, 1, CASE WHEN g <= 200 THEN 'queued' ELSE 'running' END, 0, 3, now(), 'push', 0, 0, '',
         now() - g * interval '1 second'
  FROM generate_series(1, 208) g;
INSERT INTO runs (job_id, attempt, status, backend, backend_reason, received_at, created_at)
  SELECT {history} + 200 + g, 1, 'ok', 'sim', '', now(), now() FROM generate_series(1, 8) g;
INSERT INTO jobs (commit_id, machine_id, config_id, state, attempts, max_attempts, updated_at, purpose, priority, round, reason, created_at)
  SELECT {history} + 208 + g, 2, 1, 'done', 1, 3, now(), 'push', 0, 0, '', now() FROM generate_series(1, 42) g;
INSERT INTO runs (job_id, attempt, status, backend, backend_reason, received_at, created_at)
  SELECT {history} + 208 + g, 1, 'ok', 'sim', '', now(), now() FROM generate_series(1, 42) g;
INSERT INTO commit_statuses (repository_id, commit_id, machine_id, scope, public_id, state, context, description, version,
                             delivery, attempts, last_error, updated_at, created_at)
  SELECT 1, g, 2, 'series', md5((-g)::text), 'failure', 'perfci/dut-02', '', 1, 'pending', 0, '', now(), now()
  FROM generate_series(1, 30) g;
INSERT INTO pushes (repository_id, branch_id, after, listed_commits, listed_shas, recorded_commits, complete, fetch_attempts, created_at)
  SELECT 1, 1, md5((-g)::text), 1, '[]', 0, false, 1, now() FROM generate_series(1, 3) g;
INSERT INTO webhook_deliveries (forge, delivery_id, event, repository_id, ref, outcome, created_at)
  SELECT 'github', 'live-' || g, 'push', 1, 'refs/heads/main', 'scheduled: push to main', now() - g * interval '30 seconds'
  FROM generate_series(1, 60) g;
INSERT INTO pull_requests (repository_id, number, title, state, base_branch, head_branch, head_sha, waiting_for, comment_body,
                           comment_version, comment_sent_version, comment_error, public_id, updated_at, created_at)
  SELECT 1, {history} + g, '', 'open', 'main', 'live' || g, md5((-g)::text), '', 'c', 2, 1, '', 'live' || g, now(), now()
  FROM generate_series(1, 5) g;
INSERT INTO agents (name, machine_id, token_hash, backends, version, last_seen_at, created_at)
  SELECT 'agent-' || g, 1 + g % 4, md5(g::text) || md5((-g)::text), '[]', '', now(), now() FROM generate_series(1, 20) g;
"""


def seed(url: str, history: int) -> None:
    from perfci_server import migrate

    owned.recreate_database(url)  # refuses a database no benchmark created
    migrate.upgrade(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        for statement in SEED.format(history=history, commits=history + 250).split(";\n"):
            if statement.strip():
                conn.execute(text(statement))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))
    engine.dispose()


def samples_of(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}


def measure(url: str, history: int, count: int) -> None:
    # a GitHub token (never sent: nothing is posted) so the repository's comments count as waiting, not disabled
    os.environ.update(PERFCI_DATABASE_URL=url, PERFCI_ENV="development", PERFCI_GITHUB_TOKEN="ghp_benchmark_never_sent")
    from perfci_server import db, metrics
    from perfci_server.settings import get_settings

    get_settings.cache_clear()
    db.reset_engine()
    statements: list[tuple[str, object]] = []  # (SQL, its parameters) as the driver got them

    def record(conn: object, cursor: object, sql: str, params: object, *_: object) -> None:
        statements.append((sql, params))

    event.listen(db.get_engine(), "before_cursor_execute", record)
    body = generate_latest(metrics.REGISTRY)  # warms the pool and the plans; its statements are the scrape's
    event.remove(db.get_engine(), "before_cursor_execute", record)
    queries = list(statements)
    values = samples_of(body)
    queued = sum(v for (name, _), v in values.items() if name == "perfci_jobs_queued")
    premise = {"database up": values[("perfci_database_up", ())] == 1, "queued": queued == 200,
               "held": sum(v for (n, _), v in values.items() if n == "perfci_jobs_running") == 8,
               "awaiting detection": values[("perfci_runs_awaiting_detection", ())] == 50,
               "pending statuses": values[("perfci_forge_posts_pending", (("post", "status"),))] == 30,
               "pending comments": values[("perfci_forge_posts_pending", (("post", "comment"),))] == 5,
               "recent deliveries": values[("perfci_webhook_deliveries_last_hour", (("forge", "github"), ("outcome", "scheduled")))] == 60,
               "incomplete pushes": values[("perfci_pushes_incomplete", ())] == 3}
    with db.get_engine().connect() as conn:
        premise["history"] = conn.execute(text("SELECT count(*) FROM jobs WHERE state = 'done'")).scalar() == history + 42 and \
            conn.execute(text("SELECT count(*) FROM webhook_deliveries")).scalar() == history // 5 + 60
    if not all(premise.values()):
        raise SystemExit(f"premise failed at history {history}: {premise}")
    # each statement's wall time as the scrape runs it (driver, network and the server's plan included)
    spent: dict[str, list[float]] = {query: [] for query, _ in queries}
    started: list[float] = []
    def before(*_: object) -> None:
        started.append(time.perf_counter())

    def after(conn: object, cursor: object, sql: str, *_: object) -> None:
        spent[sql].append((time.perf_counter() - started.pop()) * 1000)

    event.listen(db.get_engine(), "before_cursor_execute", before)
    event.listen(db.get_engine(), "after_cursor_execute", after)
    times, cpu = [], []
    for _ in range(count):
        start, start_cpu = time.perf_counter(), time.process_time()
        generate_latest(metrics.REGISTRY)
        times.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    print(f"history {history:>9,} jobs: scrape {statistics.mean(times):7.1f} ms mean wall (range {min(times):.1f}-{max(times):.1f}), "
          f"{statistics.mean(cpu):.1f} ms of this process's CPU; {count} scrapes, {len(queries)} queries")
    event.remove(db.get_engine(), "before_cursor_execute", before)
    event.remove(db.get_engine(), "after_cursor_execute", after)
    print(f"    {'in scrape':>10}  {'EXPLAIN':>10}  query, and the scans its plan uses")
    engine = db.get_engine()
    with engine.connect() as conn:
        for query, params in queries:
            plan = [row[0] for row in conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT TEXT) " + query, params)]
            top = next(line for line in plan if "->" in line or line == plan[0]).strip().removeprefix("-> ")
            took = next(line for line in plan if line.startswith("Execution Time")).split(": ")[1].removesuffix(" ms")
            scans = sorted({part.split(" on ")[0].strip().removeprefix("-> ") + " on " + part.split(" on ")[1].split()[0]
                            for part in plan if " on " in part and "Scan" in part})
            print(f"    {statistics.mean(spent[query]):7.2f} ms  {float(took):7.2f} ms  {' '.join(query.split())[:60]:60}  "
                  f"{'; '.join(scans) or top}")
    db.reset_engine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", default="10000,100000,1000000", help="finished jobs of history, comma-separated")
    parser.add_argument("--samples", type=int, default=15, help="scrapes timed per size")
    parser.add_argument("--database-url", default=DEFAULT_DB)
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"host: {os.cpu_count()} CPUs, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; database {args.database_url.rsplit('/', 1)[1]}")
    for history in (int(h) for h in args.history.split(",")):
        seed(args.database_url, history)
        measure(args.database_url, history, args.samples)


if __name__ == "__main__":
    main()
