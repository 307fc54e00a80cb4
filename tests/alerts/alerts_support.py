"""Builders for measured series: pushes of many commits through the webhook, jobs scheduled,
claimed and uploaded by an enrolled agent with documents shaped like `perfci measure --json`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import text

from perfci_core.result import BenchConfig
from perfci_server.alerts import detection as alert_detection
from perfci_server.settings import get_settings
from tests.server.server_support import (
    ADMIN, GITHUB_BEFORE, body_of, complete_pushes, create_config, create_repository, enroll, github_headers, push_payload, result_document,
)

SIM = {"name": "sim-64B", "backend": "sim", "repetitions": 1, "packets": 65_536, "warmup": 2_000}  # sim caps its packet counts
TSC = {"name": "self-64B", "backend": "tsc"}
SIM_PACKETS = 65_536.0
TSC_HZ = 2.1e9

Values = Callable[[int, str], dict[str, list[float]]]  # (commit index, config name) -> metric -> reps


def sha_of(i: int, salt: str = "") -> str:
    return hashlib.sha1(f"perfci-test-commit-{salt}{i}".encode()).hexdigest()


def push_commits(client: Any, shas: list[str], before: str, branch: str = "main", subjects: list[str] | None = None,
                 delivery: str = "") -> Any:
    start = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    commits = [
        {
            "id": sha,
            "tree_id": hashlib.sha1(sha.encode()).hexdigest(),
            "distinct": True,
            "message": (subjects[i] if subjects else f"fwd: change {i}") + "\n\nSigned-off-by: Ada Lovelace <ada@example.com>",
            "timestamp": (start + timedelta(minutes=i)).isoformat(),
            "url": f"https://github.com/perfci-org/dataplane/commit/{sha}",
            "author": {"name": "Ada Lovelace", "email": "ada@example.com", "username": "ada"},
            "committer": {"name": "GitHub", "email": "noreply@github.com", "username": "web-flow"},
            "added": [], "removed": [], "modified": ["dataplane/fwd.c"],
        }
        for i, sha in enumerate(shas)
    ]
    payload = push_payload(ref=f"refs/heads/{branch}", before=before, after=shas[-1], commits=commits, head_commit=commits[-1])
    body = body_of(payload)
    response = client.post("/api/v1/webhooks/github", content=body, headers=github_headers(body, delivery=delivery or f"d-{shas[0][:12]}"))
    assert response.status_code == 202, response.text
    return response


def document(commit: str, config: dict[str, Any], values: dict[str, list[float]], machine_id: str, machine: dict[str, Any]) -> dict[str, Any]:
    """A result document with raw counts consistent with the metric values of its backend."""
    backend = config["backend"]
    reps = len(next(iter(values.values())))
    bench = {k: v for k, v in config.items() if k in BenchConfig.model_fields}
    doc = result_document(commit, config=bench, machine_id=machine_id, reps=reps, values=values, backend=backend)
    doc["machine"] = machine
    for sample in doc["samples"]:
        rep = sample["rep"]
        if backend == "sim":
            ipp = values.get("ipp", [81.72] * reps)[rep]
            sample["raw"] = {"sim.fwd_instructions": ipp * SIM_PACKETS, "sim.fwd_packets": SIM_PACKETS,
                             "sim.d1_misses": 0.0312 * SIM_PACKETS, "sim.ll_misses": 0.0021 * SIM_PACKETS,
                             "sim.cache_packets": SIM_PACKETS}
            blocks = values.get("sf_blocks_pp", [0.0] * reps)[rep] * SIM_PACKETS
            sample["raw"]["sim.sf_blocks"] = blocks
            if blocks:  # where memhazard saw them, as the sim backend names a site
                sample["raw"][SF_SITE] = blocks
        else:
            cpp = values.get("cpp", [7.65] * reps)[rep]
            sample["raw"] = {"tsc.packets": 2_000_000.0, "tsc.busy_cycles": cpp * 2_000_000.0,
                             "tsc.window_cycles": cpp * 2_000_000.0 / 0.97, "tsc.tsc_hz": TSC_HZ, "pmu.cycles": None}
    return doc


SF_SITE = "sim.site.sf_blocks.ttl_decrement@fwd.c:104"


def sim_values(ipp: float, sf_blocks_pp: float | None = None, alias_4k_pp: float | None = None) -> dict[str, list[float]]:
    values = {"ipp": [ipp], "l1d_misses_pp": [0.0312], "llc_misses_pp": [0.0021]}
    if sf_blocks_pp is not None:
        values["sf_blocks_pp"] = [sf_blocks_pp]
    if alias_4k_pp is not None:
        values["alias_4k_pp"] = [alias_4k_pp]
    return values


def tsc_values(rng: np.random.Generator, cpp_level: float, rel_noise: float, reps: int = 5) -> dict[str, list[float]]:
    """Fresh-process tsc runs: CPP with noise and the occasional slow run (docs/design.md, "These machines": heavy upper
    tail), PPS and CUR consistent with it (PPS = Freq x CUR / CPP)."""
    cpp = cpp_level * (1 + rel_noise * rng.standard_normal(reps))
    slow = rng.random(reps) < 0.05
    cpp = np.where(slow, cpp * 1.15, cpp)
    cur = np.full(reps, 0.97)
    return {"cpp": cpp.tolist(), "pps": (TSC_HZ * cur / cpp).tolist(), "cur": cur.tolist()}


class Lab:
    """One repository with configs and agents; grows a branch and measures it through the API."""

    def __init__(self, client: Any, session: Any, sent_tasks: Any, configs: tuple[dict[str, Any], ...] = (SIM,)):
        self.client, self.session, self.sent_tasks = client, session, sent_tasks
        self.repo = create_repository(client)
        self.configs = {c["name"]: create_config(client, **c) | {"backend": c["backend"]} for c in configs}
        self.agents: dict[str, dict[str, Any]] = {}
        self.shas: dict[str, list[str]] = {}
        self.ran_detections = 0
        self.completed = 0  # push completions run so far
        self.sessions: list[list[int]] = []  # the job ids of each claim (two: an interleaved pair, measured together)

    def agent(self, name: str = "dut-01", machine: dict[str, Any] | None = None) -> dict[str, Any]:
        machine = machine or {"cpu_model": "Intel(R) Xeon(R) Gold 6338", "cores": 32, "kernel": "6.1.0-18-amd64",
                              "governor": "performance", "turbo": False, "host": name}
        key = name + json.dumps(machine, sort_keys=True)
        if key not in self.agents:
            enrolled = enroll(self.client, name=name, machine=machine, backends=["sim", "tsc"])
            enrolled["machine"] = machine
            self.client.patch(f"/api/v1/machines/{enrolled['machine_id']}", json={"name": name}, headers=ADMIN)
            self.agents[key] = enrolled
        return self.agents[key]

    def push(self, n: int, branch: str = "main", subjects: list[str] | None = None, salt: str = "") -> list[str]:
        """Push n new commits on the branch and schedule their jobs (as the scheduling task would)."""
        shas = self.shas.setdefault(branch, [])
        new = [sha_of(len(shas) + i, salt=branch + salt) for i in range(n)]
        before = shas[-1] if shas else GITHUB_BEFORE
        push_commits(self.client, new, before, branch, subjects)
        # The completion task, as a worker runs it: the repository (example.com) cannot be fetched
        # here, so the payload's commits go on the branch with their jobs.
        self.completed = complete_pushes(self.session, self.sent_tasks, self.completed)
        self.session.commit()
        shas.extend(new)
        return new

    def measure(self, values: Values, agent: dict[str, Any], branch: str = "main") -> list[int]:
        """Claim and upload every queued job of the agent's machine; returns the run ids."""
        index = {sha: i for i, sha in enumerate(self.shas[branch])}
        runs = []
        while True:
            claim = self.client.post("/api/v1/agent/jobs/claim", headers=agent["headers"])
            if claim.status_code == 204:
                self.analyse()
                return runs
            assert claim.status_code == 200, claim.text
            job = claim.json()
            config = self.configs[job["config"]["name"]]
            self.sessions.append([job["job_id"]] + ([job["partner"]["job_id"]] if job.get("partner") else []))
            sides = [job] + ([{**job, **job["partner"]}] if job.get("partner") else [])  # an interleaved pair: both
            for side in sides:
                doc = document(side["commit"], config, values(index[side["commit"]], config["name"]), agent["fingerprint"],
                               agent["machine"])
                upload = self.client.put(f"/api/v1/agent/jobs/{side['job_id']}/attempts/{side['attempt']}/result",
                                         content=json.dumps(doc), headers={**agent["headers"], "Content-Type": "application/json"})
                assert upload.status_code == 201, upload.text
                runs.append(upload.json()["run_id"])

    def analyse(self) -> None:
        """The planner's statistics of the series tables, as autovacuum keeps them for committed rows.
        It never sees this test's uncommitted rows: after a test rolled back it has analysed near-empty
        tables, and the window's read of a few hundred commits then runs as nested loops (20 s a read)."""
        self.session.execute(text("ANALYZE commits, branch_commits, jobs, runs, metric_values"))

    def detect(self) -> list[alert_detection.Outcome]:
        """Run the detection tasks the uploads sent (in this process, in the test's transaction)."""
        sent = self.sent_tasks.named(alert_detection.DETECT_TASK)
        outcomes = [alert_detection.detect_pending(self.session, machine_id, get_settings()) for (machine_id,) in sent[self.ran_detections:]]
        self.ran_detections = len(sent)
        self.session.commit()
        return outcomes

    def alerts(self, **filters: Any) -> list[dict[str, Any]]:
        response = self.client.get("/api/v1/alerts", params={"limit": 500, **filters})
        assert response.status_code == 200, response.text
        return response.json()["items"]


def committed_sim_lab(client: Any, sent_tasks: Any, n: int, step: int) -> Lab:
    """A committed (visible to other connections) sim series of n commits, IPP +2.9 % from ``step``,
    measured on dut-01 and through detection. The caller closes ``lab.session``."""
    from perfci_server import db

    lab = Lab(client, db.new_session(), sent_tasks, configs=(SIM,))
    lab.agent_row = lab.agent("dut-01")
    lab.push(n)
    lab.measure(lambda i, _: sim_values(81.72 * (1.029 if i >= step else 1.0)), lab.agent_row)
    lab.detect()
    return lab
