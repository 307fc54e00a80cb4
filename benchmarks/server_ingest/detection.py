"""Detection task cost: the worker CPU one detection spends after uploads, with the window cache
(alerts.window) and with a full read of the window, back to back on the same uploads.

    .venv/bin/python benchmarks/server_ingest/detection.py [--commits 1000] [--batches 1,10,50]
        [--samples 15] [--profile 25] [--smoke]

A server on its own database (benchmarks/owned.py) takes the ingest benchmark's documents (5
repetitions x every catalogue (metric, backend) pair, ipp/sim 5 % higher from the middle commit):
``--commits`` minus what the batches need are uploaded first and detected as one backlog. Then,
for each batch size, ``--samples`` times: that many uploads, then the detection task of the
machine run in this process twice on the same runs — once reading the whole window from the
tables (rolled back; a window built afresh, so its series are searched from scratch), once with
the cached window (committed; with each series' search kept from the last detection, as a worker
keeps it: alerts.window), in alternating order — each timed
by this process's CPU clock (time.process_time). The ratio of the two is what holds on a busy
machine; the absolute figures move with the machine's load (printed with them). ``--profile N``
prints the N costliest functions (cProfile, cumulative) of the cached detections. The run fails
(exit 1, saying why) unless detection read the uploaded commits in branch order and, once all are
uploaded, raised the ipp/sim alert at the stepped commit.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: the benchmarks package

from benchmarks import owned
from benchmarks.premise import require
from benchmarks.server_ingest import run as ingest

DEFAULT_DB = owned.default_database_url("detection")


def _upload(port: int, agents: list[dict], count: int) -> int:
    """``count`` claim -> upload cycles spread over the agents; returns how many were done."""
    done = [0]
    lock = threading.Lock()

    def loop(agent: dict) -> None:
        api = ingest.Api(port, agent["token"])
        while True:
            with lock:
                if done[0] >= count:
                    return
                done[0] += 1
            if not ingest._claim_and_upload(api, agent, 0.0, [], []):
                return

    threads = [threading.Thread(target=loop, args=(a,)) for a in agents]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done[0]


def _detect(machine_id: int, settings, commit: bool, profile: cProfile.Profile | None = None) -> tuple[float, int]:
    """(CPU seconds, runs) of one detection task of the machine, in this process."""
    from perfci_server import db
    from perfci_server.alerts import series_repository as series_sql
    from perfci_server.alerts import detection

    session = db.new_session()
    try:
        pending = len(series_sql.lock_pending_runs(session, machine_id, detection.PENDING_BATCH))
        session.rollback()
        if profile:
            profile.enable()
        t0 = time.process_time()
        detection.detect_pending(session, machine_id, settings)
        session.flush()
        cpu = time.process_time() - t0
        if profile:
            profile.disable()
        if commit:
            session.commit()
        else:
            session.rollback()
        return cpu, pending
    finally:
        session.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=1000, help="measured commits of the series")
    parser.add_argument("--batches", default="1,10,50", help="uploads per detection task, comma-separated")
    parser.add_argument("--samples", type=int, default=15, help="detections timed per batch size")
    parser.add_argument("--database-url", default=ingest.owned.default_database_url("detection"))
    parser.add_argument("--redis-url", default=ingest.DEFAULT_REDIS)
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="print the N costliest functions of the cached detections")
    parser.add_argument("--smoke", action="store_true", help="a run of seconds with the same checks: 60 commits, batches 1,5, 2 samples")
    args = parser.parse_args()
    if args.smoke:
        args.commits, args.batches, args.samples = 60, "1,5", 2
    batches = [int(b) for b in args.batches.split(",")]
    reserve = sum(batches) * args.samples
    if reserve >= args.commits:
        sys.exit(f"--commits must exceed the uploads the batches need ({reserve})")

    url = ingest._recreate_database(args.database_url)
    os.environ.update({"PERFCI_DATABASE_URL": url, "PERFCI_BROKER_URL": args.redis_url, "PERFCI_ENV": "production",
                       "PERFCI_ADMIN_TOKEN": ingest.ADMIN_TOKEN})
    from perfci_server import db
    from perfci_server.settings import get_settings

    get_settings.cache_clear()  # imports above read the environment before it named this database
    db.reset_engine()
    settings = get_settings()
    full = settings.model_copy(update={"detection_window_cache": False})
    ingest._queued_tasks(args.redis_url, purge=True)
    port = ingest._free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "perfci_server.asgi:app", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--no-access-log", "--log-level", "warning"], cwd=ingest.ROOT, env={**os.environ, "PERFCI_LOG_LEVEL": "warning"},
        start_new_session=True)
    state_before = ingest.MachineState()
    try:
        ingest._wait_until_up(port, server)
        agents, stepped = ingest._setup(port, url, 1, 4, args.commits)
        machine_id = _machine_id(url)
        t0 = time.perf_counter()
        uploaded = _upload(port, agents, args.commits - reserve)
        print(f"series: {args.commits} commits x 1 config x {_pairs(agents[0])} (metric, backend) pairs x 5 repetitions; "
              f"{uploaded} uploaded in {time.perf_counter() - t0:.1f} s")
        cpu, runs = _detect(machine_id, settings, commit=True)
        _require_window_holds(url, uploaded)
        print(f"backlog: one detection of {runs} runs took {cpu:.2f} s CPU (every position analysed: window + late uploads)")
        profile = cProfile.Profile() if args.profile else None
        print(f"{'uploads/task':>12} {'full read ms/task':>18} {'cached ms/task':>15} {'cached ms/upload':>17} {'full/cached':>12}")
        for batch in batches:
            fulls, cacheds = [], []
            for i in range(args.samples):
                _upload(port, agents, batch)
                # Both on the same runs: the first rolled back; which goes first alternates.
                order = ((True, False), (False, False)) if i % 2 else ((False, False), (True, True))
                for cached, commit in order:
                    cpu, runs = _detect(machine_id, settings if cached else full, commit=commit, profile=profile if cached else None)
                    (cacheds if cached else fulls).append(cpu * 1000)
                    require(runs == batch, f"a detection task took {runs} runs after {batch} uploads")
                if i % 2:
                    _detect(machine_id, settings, commit=True)  # untimed: mark them detected
            f, c = statistics.median(fulls), statistics.median(cacheds)
            print(f"{batch:12d} {f:12.1f} ({min(fulls):.0f}-{max(fulls):.0f}) {c:9.1f} ({min(cacheds):.0f}-{max(cacheds):.0f}) "
                  f"{c / batch:17.2f} {f / c:12.1f}x")
        _require_step_alert(url, stepped)
        print(f"machine: {state_before.report()}")
        if profile is not None:
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(args.profile)
            print(out.getvalue())
    finally:
        server.terminate()
        server.wait(timeout=20)
        ingest._queued_tasks(args.redis_url, purge=True)


def _require_window_holds(url: str, uploaded: int) -> None:
    """The premise of every figure here: detection read series that hold the uploaded commits in
    branch order (runs of commits not on the branch would be detected over empty series)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as conn:
        on_branch = conn.execute(text("""
            SELECT count(DISTINCT j.commit_id) FROM runs r JOIN jobs j ON j.id = r.job_id
            JOIN branch_commits bc ON bc.commit_id = j.commit_id WHERE r.status = 'ok' AND r.detected_at IS NOT NULL""")).scalar_one()
    engine.dispose()
    require(on_branch == uploaded, f"detection analysed {on_branch} commits on the branch of the {uploaded} uploaded")


def _require_step_alert(url: str, stepped: str) -> None:
    """All commits uploaded, the +5 % ipp/sim step must have raised its alert at the stepped commit."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as conn:
        found = conn.execute(text("""
            SELECT count(*) FROM alerts a JOIN commits c ON c.id = a.first_bad_commit_id
            WHERE c.sha = :sha AND a.metric = :metric AND a.backend = :backend"""),
            {"sha": stepped, "metric": ingest.STEP_METRIC[0], "backend": ingest.STEP_METRIC[1]}).scalar_one()
    engine.dispose()
    require(found == 1, f"{found} {'/'.join(ingest.STEP_METRIC)} alerts at the stepped commit {stepped[:12]}, not 1")


def _machine_id(url: str) -> int:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as conn:
        machine_id = conn.execute(text("SELECT id FROM machines ORDER BY id LIMIT 1")).scalar_one()
    engine.dispose()
    return machine_id


def _pairs(agent: dict) -> int:
    import json

    return len(json.loads(agent["template"])["samples"][0]["metrics"])


if __name__ == "__main__":
    main()
