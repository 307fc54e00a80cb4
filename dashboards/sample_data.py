"""Realistic sample data for the dashboards: machines x configs x commits x repetitions of every
lean-model metric, three known changes along the branch, and the alert groups that describe them.

Used by the dashboard tests and benchmark, and to preview the dashboards in a local Grafana. Rows
go in with COPY (the ~200k metric values of the default shape take a few seconds). Values follow
the lean model exactly: CPP = IPP / eIPC and PPS = Freq x CUR / CPP per repetition, with
per-metric run-to-run noise (none for the simulated `sim` backend).

The known changes (fractions of the branch length):
- at 24 %: IPP +3 % (an extra per-packet step; every machine, every config)    -> alerts, "fixed"
- at 60 %: eIPC -5 % with 19x the store-forward blocks (pmu machines only)     -> alerts, "untriaged"
- at 84 %: IPP -2 % (an improvement)                                            -> alerts, "acknowledged"
- 3 commits before the head, on the first machine and config: a suspected CPP regression still
  being confirmed (a pending suspect, one queued confirmation round of its 3 commits)
- over the branch's last tenth, on the last machine and first config: a CPP creep (+1.8 %)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import Connection, text

from perfci_core import metrics as catalogue
from perfci_core.analysis.series import relative_change

PMU_METRICS = ("ipc", "eipc", "ipp", "cpp", "pps", "cur", "cache_miss_rate", "cache_misses_pp", "l1d_misses_pp",
               "llc_misses_pp", "sf_blocks_pp", "sf_blocks_pki", "branch_misses_pp", "roi_cpu")
SIM_METRICS = ("ipp", "l1d_misses_pp", "llc_misses_pp", "sf_blocks_pp", "split_loads_pp", "split_stores_pp", "alias_4k_pp",
               "line_transfers_pp", "read_transfers_pp")
# Measured as a scaling config on the PMU machines too (1 and 2 lcores, RAPL read): B and its
# bootstrap interval, E(2), PPS(2), ROI and package energy.
SCALING_CONFIG = "self-64B"
SCALING_METRICS = ("pps_max_lcores", "scaling_efficiency", "serial_fraction", "serial_fraction_low", "serial_fraction_high",
                   "power_w", "energy_per_packet", "roi_power", "other_cpus_busy")
BASELINE_COMMITS = 10  # commits on each side of a change used for the alerts' before/after medians


@dataclass(frozen=True)
class Step:
    fraction: float
    subject: str
    status: str
    ipp: float = 1.0
    eipc: float = 1.0
    sf_blocks: float = 1.0

    def metrics(self, backend: str) -> tuple[str, ...]:
        if backend == "sim":  # exact IPP; the simulated store-forward blocks go from none to one per packet
            return tuple((["ipp"] if self.ipp != 1.0 else []) + (["sf_blocks_pp"] if self.sf_blocks != 1.0 else []))
        moved = ["cpp", "pps"] + (["ipp"] if self.ipp != 1.0 else []) + (["eipc"] if self.eipc != 1.0 else [])
        return tuple(moved + (["sf_blocks_pp"] if self.sf_blocks != 1.0 else []))


STEPS = (
    Step(0.24, "fwd: run the TTL/checksum update as a separate pass over the burst", "fixed", ipp=1.03),
    Step(0.60, "rx: write pkt_len into the descriptors through a scalar pointer", "untriaged",
         eipc=0.95, sf_blocks=19.0),
    Step(0.84, "lpm: look up four destinations per call", "acknowledged", ipp=0.98),
)

_SUBJECTS = ("fwd: tidy the TX drain loop", "lpm: add routes from the config file", "stats: count drops per port",
             "harness: pace the self-fed ring", "build: bump meson minimum", "docs: explain the burst size",
             "eal: parse --cold-data", "fwd: rename per-lcore state", "tests: cover the 1518B template")
_CONFIGS = (("self-64B", 64, 82.0), ("self-1518B", 1518, 96.0), ("pcap-64B", 64, 88.0), ("self-64B-4kflows", 64, 84.5),
            ("self-512B", 512, 90.0), ("pcap-1518B", 1518, 99.0))


@dataclass(frozen=True)
class Shape:
    machines: int = 3  # the last one is a VM measured with sim; the others have a PMU
    configs: int = 3
    commits: int = 500
    reps: int = 5
    seed: int = 8
    repository: str = "acme/dataplane"


@dataclass
class Seeded:
    repository_id: int
    branch_id: int
    machines: dict[str, int]  # name -> id
    machine_backends: dict[str, str]  # name -> backend
    configs: dict[str, int]
    commit_ids: list[int]  # by position (0-based)
    shas: list[str]
    metric_values: int  # values (sample x metric), not rows: a row holds a run's repetitions
    alert_groups: dict[tuple[int, str], int] = field(default_factory=dict)  # (step index, machine) -> group id

    def position_of_step(self, step: Step) -> int:
        return int(step.fraction * len(self.commit_ids))


class _Ids:
    """Explicit ids after each table's current maximum (COPY cannot return generated ids)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.next: dict[str, int] = {}

    def take(self, table: str, n: int) -> range:
        if table not in self.next:
            self.next[table] = self.connection.execute(text(f"SELECT coalesce(max(id), 0) + 1 FROM {table}")).scalar_one()
        first = self.next[table]
        self.next[table] += n
        return range(first, first + n)

    def sync_sequences(self) -> None:
        for table, next_id in self.next.items():
            self.connection.execute(text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), :v)"), {"v": next_id - 1})


@contextmanager
def _foreign_keys_checked_once(connection: Connection, table: str) -> Iterator[None]:
    """Drop the table's foreign keys for a bulk load and add them back afterwards: re-adding
    validates every row in one join instead of one lookup per row and key, which was most of the
    seeding time. Same transaction, so a failure rolls the drop back too."""
    keys = connection.execute(text(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = CAST(:t AS regclass) AND contype = 'f'"),
        {"t": table}).all()
    for name, _ in keys:
        connection.execute(text(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"'))
    yield
    for name, definition in keys:
        connection.execute(text(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}'))


def _copy(connection: Connection, table: str, columns: tuple[str, ...], rows) -> int:
    cursor = connection.connection.driver_connection.cursor()
    count = 0
    with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
            count += 1
    return count


def _truth(positions: int, machine: int, config_ipp: float) -> dict[str, np.ndarray]:
    """Per-commit true values of the factors along the branch, steps applied."""
    ipp = np.full(positions, config_ipp * (1 + 0.01 * machine))
    eipc = np.full(positions, 2.45 + 0.15 * machine)
    sf = np.full(positions, 0.010)
    sim_sf = np.zeros(positions)  # memhazard: no block, then one per packet
    for step in STEPS:
        at = int(step.fraction * positions)
        ipp[at:] *= step.ipp
        eipc[at:] *= step.eipc
        sf[at:] *= step.sf_blocks
        if step.sf_blocks != 1.0:
            sim_sf[at:] = 1.0
    # small drifts unrelated to the steps, so the series are not flat lines
    ipp *= 1 + 0.002 * np.sin(np.arange(positions) / 37.0)
    return {"ipp": ipp, "eipc": eipc, "sf": sf, "sim_sf": sim_sf, "freq": np.full(positions, 2.1e9 + 0.3e9 * machine),
            "cur": np.full(positions, 0.97), "l1d": np.full(positions, 1.2 + 0.1 * machine),
            "llc": np.full(positions, 0.04)}


def _rep_values(truth: dict[str, np.ndarray], position: int, backend: str, noise: np.ndarray) -> dict[str, float]:
    """One repetition's metrics; ``noise`` is a row of standard normals."""
    if backend == "sim":  # exact, repeatable
        return {"ipp": float(truth["ipp"][position]), "l1d_misses_pp": float(truth["l1d"][position]),
                "llc_misses_pp": float(truth["llc"][position]), "sf_blocks_pp": float(truth["sim_sf"][position]),
                "split_loads_pp": 0.0, "split_stores_pp": 0.0, "alias_4k_pp": 0.59,
                "line_transfers_pp": 0.0, "read_transfers_pp": 0.0}  # one lcore: no line moves
    ipp = truth["ipp"][position] * (1 + 0.002 * noise[0])
    eipc = truth["eipc"][position] * (1 + 0.008 * noise[1])
    cur = min(1.0, truth["cur"][position] * (1 + 0.003 * noise[2]))
    cpp = ipp / eipc
    sf = max(0.0, truth["sf"][position] * (1 + 0.05 * noise[3]))
    cache_pp = 0.42 * (1 + 0.03 * noise[4])
    return {
        "ipc": eipc * cur, "eipc": eipc, "ipp": ipp, "cpp": cpp, "pps": truth["freq"][position] * cur / cpp, "cur": cur,
        "cache_miss_rate": 0.11 * (1 + 0.03 * noise[5]), "cache_misses_pp": cache_pp,
        "l1d_misses_pp": truth["l1d"][position] * (1 + 0.02 * noise[6]),
        "llc_misses_pp": truth["llc"][position] * (1 + 0.05 * noise[7]),
        "sf_blocks_pp": sf, "sf_blocks_pki": 1000.0 * sf / ipp, "branch_misses_pp": 0.021 * (1 + 0.04 * noise[8]),
        "roi_cpu": (truth["freq"][position] * cur / cpp / 1e6) ** 2 / cur,
    }


def _scaling_values(pps1: float, cur: float, noise: np.ndarray) -> dict[str, float]:
    """One repetition of a 1-and-2-lcore scaling run around B = 0.05 and 45 W."""
    b = max(0.0, 0.05 + 0.01 * noise[0])
    pps2 = pps1 * 2 / (1 + b)
    watts = 45.0 * (1 + 0.01 * noise[1])
    return {"pps_max_lcores": pps2, "scaling_efficiency": pps2 / (2 * pps1), "serial_fraction": b,
            "serial_fraction_low": 0.035, "serial_fraction_high": 0.065,
            "roi_cpu": (pps2 / 1e6) ** 2 / (2 * cur),  # at the widest run, as the agent derives it
            "power_w": watts, "energy_per_packet": 1e9 * watts / pps2, "roi_power": (pps2 / 1e6) ** 2 / watts,
            "other_cpus_busy": 0.1}


def seed(connection: Connection, shape: Shape = Shape(), now: datetime | None = None) -> Seeded:
    """Insert the sample data in the connection's transaction (the caller commits or rolls back)."""
    rng = np.random.default_rng(shape.seed)
    scaling_rng = np.random.default_rng(shape.seed + 1)  # its own stream: the other series stay as they were
    ids = _Ids(connection)
    now = (now or datetime.now(UTC)).replace(second=0, microsecond=0)
    created = now - timedelta(days=400)

    [repository_id] = ids.take("repositories", 1)
    _copy(connection, "repositories", ("id", "name", "forge", "clone_url", "webhook_secret", "track_tags", "created_at"),
          [(repository_id, shape.repository, "github", f"git@github.com:{shape.repository}.git", "sample-data-secret-0000", False, created)])
    [branch_id] = ids.take("branches", 1)

    n = shape.commits
    commit_ids = list(ids.take("commits", n))
    shas = [hashlib.sha1(f"{shape.repository}-{shape.seed}-{i}".encode()).hexdigest() for i in range(n)]
    step_at = {int(s.fraction * n): s for s in STEPS}
    times = [now - timedelta(hours=4 * (n - 1 - i), minutes=int(rng.integers(0, 90))) for i in range(n)]
    for i in range(5, n, 37):  # rebased commits: dated before their predecessor on the branch
        times[i] = times[i - 1] - timedelta(days=1)
    authors = ("Ada Ring", "Lin Burst", "Sam Prefetch", "Kai Mbuf")

    def message(i: int) -> str:
        subject = step_at[i].subject if i in step_at else _SUBJECTS[i % len(_SUBJECTS)]
        return f"{subject}\n\nSample commit {i} of the dashboards' sample data."

    _copy(connection, "commits", ("id", "repository_id", "sha", "parents", "author_name", "author_email", "committed_at", "message", "created_at"),
          ((commit_ids[i], repository_id, shas[i], json.dumps([shas[i - 1]] if i else []), authors[i % 4],
            f"{authors[i % 4].split()[0].lower()}@example.com", times[i], message(i), times[i]) for i in range(n)))
    _copy(connection, "branches", ("id", "repository_id", "name", "head_sha", "created_at"),
          [(branch_id, repository_id, "main", shas[-1], created)])
    _copy(connection, "branch_commits", ("branch_id", "commit_id", "position"), ((branch_id, commit_ids[i], i) for i in range(n)))

    machine_names = [f"dut-{i + 1:02d}" for i in range(shape.machines - 1)] + ["ci-vm-01"]
    backends = {name: ("sim" if name.startswith("ci-vm") else "pmu") for name in machine_names}
    machine_ids = dict(zip(machine_names, ids.take("machines", len(machine_names))))
    _copy(connection, "machines", ("id", "fingerprint", "name", "details", "enabled", "created_at"),
          ((mid, hashlib.sha256(name.encode()).hexdigest(), name, json.dumps({"cpu_model": "sample", "backend": backends[name]}), True, created)
           for name, mid in machine_ids.items()))
    configs = _CONFIGS[: shape.configs]
    config_ids = dict(zip((c[0] for c in configs), ids.take("bench_configs", len(configs))))
    _copy(connection, "bench_configs", ("id", "name", "harness", "pkt_size", "flows", "routes", "packets", "warmup", "backend", "repetitions", "enabled", "created_at"),
          ((config_ids[name], name, name.split("-")[0], size, 1024, "default", 2_000_000, 200_000, "auto", shape.reps, True, created)
           for name, size, _ in configs))

    jobs, runs, samples, values = [], [], [], []
    series_medians: dict[tuple[str, str, str], np.ndarray] = {}
    job_ids = iter(ids.take("jobs", n * len(machine_ids) * len(configs)))
    run_ids = iter(ids.take("runs", n * len(machine_ids) * len(configs)))
    sample_ids = iter(ids.take("samples", n * len(machine_ids) * len(configs) * shape.reps))
    for m_index, (machine, machine_id) in enumerate(machine_ids.items()):
        backend = backends[machine]
        for config, _, config_ipp in configs:
            scaled = backend == "pmu" and config == SCALING_CONFIG
            metric_names = SIM_METRICS if backend == "sim" else PMU_METRICS + (SCALING_METRICS if scaled else ())
            config_id = config_ids[config]
            truth = _truth(n, m_index, config_ipp)
            noise = rng.standard_normal((n, shape.reps, 9))
            medians = {name: np.empty(n) for name in metric_names}
            for i in range(n):
                job_id, run_id = next(job_ids), next(run_ids)
                at = times[i] + timedelta(minutes=20)
                jobs.append((job_id, commit_ids[i], machine_id, config_id, "done", 1, 3, at, at))
                runs.append((run_id, job_id, 1, "ok", backend, "sample data", at, at, at, at))
                reps = [_rep_values(truth, i, backend, noise[i, r]) for r in range(shape.reps)]
                if scaled:
                    for rep in reps:
                        rep.update(_scaling_values(rep["pps"], rep["cur"], scaling_rng.standard_normal(2)))
                for r in range(shape.reps):
                    samples.append((next(sample_ids), run_id, r, "{}", "{}"))
                for name in metric_names:
                    values.append((run_id, name, backend, commit_ids[i], machine_id, config_id, [float(rep[name]) for rep in reps]))
                for name in metric_names:
                    medians[name][i] = float(np.median([rep[name] for rep in reps]))
            for name in metric_names:
                series_medians[(machine, config, name)] = medians[name]

    _copy(connection, "jobs", ("id", "commit_id", "machine_id", "config_id", "state", "attempts", "max_attempts", "updated_at", "created_at"), jobs)
    _copy(connection, "runs", ("id", "job_id", "attempt", "status", "backend", "backend_reason", "started_at", "finished_at", "received_at", "created_at"), runs)
    _copy(connection, "samples", ("id", "run_id", "rep", "raw", "running_pct"), samples)
    with _foreign_keys_checked_once(connection, "metric_values"):
        _copy(connection, "metric_values", ("run_id", "metric", "backend", "commit_id", "machine_id", "config_id", "rep_values"), values)

    seeded = Seeded(repository_id, branch_id, machine_ids, backends, config_ids, commit_ids, shas, len(values) * shape.reps)
    _seed_alerts(connection, ids, seeded, configs, series_medians, times)
    _seed_suspect(connection, ids, seeded, configs, times)
    _seed_creep(connection, ids, seeded, configs, times)
    ids.sync_sequences()
    # Every table the panels join: statistics left from an earlier (rolled-back) seeding can make
    # the planner nest-loop over runs and jobs for minutes.
    for table in ("metric_values", "samples", "runs", "jobs", "branch_commits", "commits", "branches", "machines",
                  "bench_configs", "alert_groups", "alerts", "suspects", "creeps"):
        connection.execute(text(f"ANALYZE {table}"))
    return seeded


def _seed_alerts(connection: Connection, ids: _Ids, seeded: Seeded, configs, series_medians, times) -> None:
    groups, alerts = [], []
    n = len(seeded.commit_ids)
    for step_index, step in enumerate(STEPS):
        at = seeded.position_of_step(step)
        for machine, machine_id in seeded.machines.items():
            backend = seeded.machine_backends[machine]
            moved = step.metrics(backend)
            if not moved:
                continue
            [group_id] = ids.take("alert_groups", 1)
            seeded.alert_groups[(step_index, machine)] = group_id
            worse = any(catalogue.get(m).is_regression(1.0, _factor(step, m)) for m in moved)
            direction = "regression" if worse else "improvement"
            when = times[at] + timedelta(hours=2)
            explanation = {"target": "cpp", "dominant": "instructions" if step.ipp != 1.0 else "stalls", "metrics": list(moved)}
            summary = f"{'+' if step.ipp > 1 or step.eipc < 1 else '-'}CPP at {seeded.shas[at][:12]}: {step.subject}"
            groups.append((group_id, seeded.repository_id, seeded.branch_id, machine_id, seeded.commit_ids[at - 1], seeded.commit_ids[at],
                           direction, step.status, "" if step.status == "untriaged" else "seen in the sample data",
                           "" if step.status == "untriaged" else "sample", None if step.status == "untriaged" else when,
                           json.dumps(explanation), summary, when, when))
            for config, _, _ in configs:
                for metric in moved:
                    medians = series_medians[(machine, config, metric)]
                    before = float(np.median(medians[max(0, at - BASELINE_COMMITS):at]))
                    after = float(np.median(medians[at:min(n, at + BASELINE_COMMITS)]))
                    metric_direction = "regression" if catalogue.get(metric).is_regression(before, after) else "improvement"
                    [alert_id] = ids.take("alerts", 1)
                    alerts.append((alert_id, group_id, seeded.configs[config], metric, backend, metric_direction,
                                   seeded.commit_ids[at - 1], seeded.commit_ids[at], before, after, 100.0 * relative_change(before, after),
                                   1.0 if backend == "sim" else 0.999, None if backend == "sim" else 1e-3, when, when))
    _copy(connection, "alert_groups", ("id", "repository_id", "branch_id", "machine_id", "last_good_commit_id", "first_bad_commit_id",
                                       "direction", "status", "triage_note", "triaged_by", "triaged_at", "explanation", "summary",
                                       "updated_at", "created_at"), groups)
    _copy(connection, "alerts", ("id", "group_id", "config_id", "metric", "backend", "direction", "last_good_commit_id",
                                 "first_bad_commit_id", "before_median", "after_median", "change_pct", "confidence", "p_value",
                                 "updated_at", "created_at"), alerts)


def _seed_suspect(connection: Connection, ids: _Ids, seeded: Seeded, configs, times) -> None:
    """A pending suspect near the head with its queued confirmation round (the alerts' pending table)."""
    machine, machine_id = next(iter(seeded.machines.items()))
    config_id = seeded.configs[configs[0][0]]
    at = len(seeded.commit_ids) - 3
    commits = seeded.commit_ids[at - 1:at + 2]
    when = times[-1] + timedelta(minutes=30)
    [suspect_id] = ids.take("suspects", 1)
    reason = "unconfirmed: +1.10% (p=0.004)"
    _copy(connection, "suspects", ("id", "branch_id", "machine_id", "config_id", "metric", "backend", "suspect_commit_id",
                                   "commit_ids", "why", "direction", "change_pct", "p_value", "state", "reason",
                                   "updated_at", "created_at"),
          [(suspect_id, seeded.branch_id, machine_id, config_id, "cpp", seeded.machine_backends[machine], seeded.commit_ids[at],
            json.dumps(commits), "unconfirmed", "regression", 1.10, 0.004, "pending", reason, when, when)])
    job_ids = ids.take("jobs", len(commits))
    _copy(connection, "jobs", ("id", "commit_id", "machine_id", "config_id", "state", "attempts", "max_attempts", "purpose",
                               "priority", "round", "reason", "updated_at", "created_at"),
          [(job_id, commit_id, machine_id, config_id, "queued", 0, 3, "confirm", 10, 1,
            f"{reason} at {seeded.shas[at][:12]}: round 1", when, when) for job_id, commit_id in zip(job_ids, commits)])


def _seed_creep(connection: Connection, ids: _Ids, seeded: Seeded, configs, times) -> None:
    """A CPP creep over the branch's last tenth (the alerts' creeps table)."""
    machine, machine_id = list(seeded.machines.items())[-1]
    n = len(seeded.commit_ids)
    first, last = n - max(2, n // 10), n - 1
    when = times[-1]
    [creep_id] = ids.take("creeps", 1)
    _copy(connection, "creeps", ("id", "branch_id", "machine_id", "config_id", "metric", "backend", "first_commit_id",
                                 "last_commit_id", "direction", "change_pct", "p_value", "updated_at", "created_at"),
          [(creep_id, seeded.branch_id, machine_id, seeded.configs[configs[0][0]], "cpp", seeded.machine_backends[machine],
            seeded.commit_ids[first], seeded.commit_ids[last], "regression", 1.8, 2e-6, when, when)])


def _factor(step: Step, metric: str) -> float:
    """How much ``metric`` is multiplied by at the step (for its direction only)."""
    return {"ipp": step.ipp, "eipc": step.eipc, "cpp": step.ipp / step.eipc, "pps": step.eipc / step.ipp,
            "sf_blocks_pp": step.sf_blocks}.get(metric, 1.0)


def describe(seeded: Seeded) -> dict[str, Any]:
    return {"repository_id": seeded.repository_id, "branch_id": seeded.branch_id, "machines": seeded.machines,
            "configs": seeded.configs, "commits": len(seeded.commit_ids), "metric_values": seeded.metric_values,
            "alert_groups": len(seeded.alert_groups)}
