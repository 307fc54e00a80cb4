"""Dashboard query benchmark: every panel, annotation and variable query of every dashboard on
~1M metric values, expanded the way Grafana expands it; prints each query's median time and the
slowest. Target: <= 200 ms per panel on the 2-core VMs.

    .venv/bin/python benchmarks/dashboards/run.py [--commits 910] [--repeat 5] [--check] [--smoke]

Needs the PostgreSQL of `.ci/services`; uses its own database `perfci_bench_dash`, recreated each
run (benchmarks/owned.py: it refuses a database no benchmark created). Shape: 4 pmu machines + 1 sim machine x 4 configs x --commits
commits x 5 repetitions (910 commits: 1,001,000 metric values). Each dashboard is timed with its
default time range and with a range covering all history. --check exits 1 above the target.
The run fails (exit 1) when the seed wrote no values or a dashboard's queries all returned no
row in a range: timings of queries over nothing measure nothing. ``--smoke``: 20 commits, one
timed run per query.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from psycopg.rows import dict_row
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: dashboards/ and the benchmarks package

from benchmarks import owned
from benchmarks.premise import require
from dashboards import JSON_DIR
from dashboards.macros import TimeRange, expand, panel_queries, resolve_variables
from dashboards.sample_data import Shape, seed
from perfci_server import migrate

TARGET_MS = 200.0
DEFAULT_DB = owned.default_database_url("dash")
CHOICES = {  # what a user looks at: a pmu machine's series (ids resolved from names below)
    "metric-trend.json": {"machine": "dut-01", "config": "self-64B", "metric": "cpp", "backend": "pmu"},
    "lean-decomposition.json": {"machine": "dut-02", "config": "self-1518B", "backend": "pmu"},
}


def fresh_schema(url: str) -> str:
    """The benchmark's database, recreated and migrated to head (refused unless a benchmark made it)."""
    owned.recreate_database(url)
    migrate.upgrade(url)
    return url


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=910)
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per query (median reported)")
    parser.add_argument("--check", action="store_true", help=f"exit 1 when a panel query is slower than {TARGET_MS:.0f} ms")
    parser.add_argument("--database-url", default=DEFAULT_DB,
                        help="the benchmark's own database (dropped and recreated; refused unless a benchmark created it)")
    parser.add_argument("--smoke", action="store_true", help="20 commits, one timed run per query (seconds)")
    args = parser.parse_args()
    if args.smoke:
        args.commits, args.repeat = 20, 1

    url = fresh_schema(args.database_url)
    engine = create_engine(url)
    started = time.perf_counter()
    now = datetime.now(UTC)
    with engine.begin() as connection:
        seeded = seed(connection, Shape(machines=5, configs=4, commits=args.commits))
    print(f"seeded {seeded.metric_values:,} metric values ({len(seeded.machines)} machines x {len(seeded.configs)} configs x "
          f"{args.commits} commits x 5 reps) in {time.perf_counter() - started:.1f} s")
    require(seeded.metric_values > 0, "the seed wrote no metric values")
    engine.dispose()

    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    timings: list[tuple[float, str]] = []
    answered: dict[tuple[str, str], int] = {}  # (dashboard, range) -> queries that returned rows
    with psycopg.connect(dsn, row_factory=dict_row, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")  # what autovacuum does to a live database

        def run(sql: str) -> list[dict]:
            return conn.execute(sql).fetchall()

        ids = {"machine": seeded.machines, "config": seeded.configs}
        for name in sorted(p.name for p in JSON_DIR.glob("*.json")):
            board = json.loads((JSON_DIR / name).read_text())
            chosen = {k: str(ids[k][v]) if k in ids else v for k, v in CHOICES.get(name, {}).items()}
            default = TimeRange.from_dashboard(board, now)
            everything = TimeRange(datetime(2000, 1, 1, tzinfo=UTC), now)
            for label, time_range in (("default range", default), ("all history", everything)):
                variables = resolve_variables(board, run, time_range, chosen)
                queries = [(q.panel, q.sql) for q in panel_queries(board)]
                queries += [(f"variable ${v['name']}", v["query"]) for v in board["templating"]["list"] if v["type"] == "query"]
                for panel, raw_sql in queries:
                    sql = expand(raw_sql, variables, time_range)
                    run(sql)  # warm the cache, as a dashboard refresh would be
                    samples, rows = [], 0
                    for _ in range(args.repeat):
                        t = time.perf_counter()
                        rows = len(run(sql))
                        samples.append((time.perf_counter() - t) * 1000)
                    timings.append((statistics.median(samples), f"{board['uid']:16s} {label:13s} {panel[:52]:52s} {rows:6d} rows"))
                    answered[board["uid"], label] = answered.get((board["uid"], label), 0) + (rows > 0)
    empty = sorted(f"{uid} ({label})" for (uid, label), n in answered.items() if n == 0)
    require(answered and not empty, f"no query returned a row: {', '.join(empty) or 'no dashboard'}")

    print(f"\n{'median ms':>9}  {'dashboard':16s} {'range':13s} {'panel':52s}")
    for ms, what in sorted(timings, reverse=True):
        print(f"{ms:9.1f}  {what}")
    slowest_ms, slowest = max(timings)
    verdict = "within" if slowest_ms <= TARGET_MS else "OVER"
    print(f"\nslowest panel query: {slowest_ms:.1f} ms ({' '.join(slowest.split())}); target {TARGET_MS:.0f} ms: {verdict}")
    print("(the VM's 2 cores are shared: figures are noisy)")
    return 1 if args.check and slowest_ms > TARGET_MS else 0


if __name__ == "__main__":
    sys.exit(main())
