"""A pull-request world for the tests: a real git repository as the forge's (the server's mirror
fetches it), the API, the tasks the server sends run in this process as a worker would, a recording
HTTP server as the forge's API, and an agent that uploads simulated results.

The dataplane's regression (a) is played by its simulated signature: one store-forward block per
packet in ``mac_rewrite`` where the base has none; ``World.regressed`` holds the commits that carry it.
"""

from __future__ import annotations

import copy
import json
from typing import Any


from tests.alerts.alerts_support import SIM, document, sim_values
from tests.alerts.forge_server import ForgeServer
from tests.server.git_forge import GitForge
from perfci_server.celery_app import registered_tasks
from tests.server.server_support import ADMIN, SECRET, body_of, create_config, enroll, fixture, github_headers

TOKEN = "ghp_" + "p" * 36
ZERO = "0" * 40
SITE = "sim.site.sf_blocks.mac_rewrite@fwd.c:188"
MACHINE = {"cpu_model": "Intel(R) Xeon(R) Gold 6338", "cores": 32, "kernel": "6.1.0-18-amd64", "governor": "performance",
           "turbo": False, "host": "dut-01"}


class World:
    """The repository on the forge, perfci's view of it, and an agent measuring what it is given."""

    def __init__(self, client: Any, sent: list[tuple[str, tuple[Any, ...]]], git: GitForge, forge: ForgeServer):
        self.client, self.sent, self.git, self.forge = client, sent, git, forge
        self.ran = 0
        self.regressed: set[str] = set()  # commits carrying the store-forward stall
        response = client.post("/api/v1/repositories", headers=ADMIN, json={
            "name": "perfci-org/dataplane", "forge": "github", "clone_url": f"file://{git.path}", "webhook_secret": SECRET})
        assert response.status_code == 201, response.text
        self.repository_id = response.json()["id"]
        self.config = create_config(client, **SIM) | {"backend": "sim"}
        self.agent = enroll(client, name="dut-01", machine=MACHINE, backends=["sim"])
        client.patch(f"/api/v1/machines/{self.agent['machine_id']}", json={"name": "dut-01"}, headers=ADMIN)
        self.deliveries = 0

    def deliver(self, event: str, payload: dict[str, Any]) -> dict[str, Any]:
        self.deliveries += 1
        body = body_of(payload)
        response = self.client.post("/api/v1/webhooks/github", content=body,
                                    headers=github_headers(body, event=event, delivery=f"d-{self.deliveries}"))
        assert response.status_code == 202, response.text
        self.run_tasks()
        return response.json()

    def push(self, branch: str, before: str, shas: list[str]) -> dict[str, Any]:
        payload = copy.deepcopy(fixture("github_push.json"))
        listed = [self.git.forge_commit(sha) for sha in shas]
        payload.update(ref=f"refs/heads/{branch}", before=before, after=shas[-1], commits=listed, head_commit=listed[-1])
        return self.deliver("push", payload)

    def pull_request(self, action: str, number: int, head_branch: str, head_sha: str, base: str = "main",
                     merged: bool = False) -> dict[str, Any]:
        payload = {"action": action, "number": number, "repository": {"full_name": "perfci-org/dataplane", "default_branch": "main"},
                   "pull_request": {"number": number, "title": "fwd: stage the MAC header", "state": "open", "merged": merged,
                                    "head": {"ref": head_branch, "sha": head_sha}, "base": {"ref": base, "sha": self.git.git("rev-parse", base)}}}
        return self.deliver("pull_request", payload)

    def measure(self) -> int:
        """Claim and upload every queued job (both sides of a pair), then run what the uploads sent."""
        uploads = 0
        while (done := self.measure_one()) is not None:
            uploads += done
        return uploads

    def measure_one(self) -> int | None:
        """Claim one job (with its partner) and upload it, then run what the uploads sent; None
        when nothing is queued."""
        uploads = 0
        claim = self.client.post("/api/v1/agent/jobs/claim", headers=self.agent["headers"])
        if claim.status_code == 204:
            self.run_tasks()
            return None
        job = claim.json()
        for side in [job] + ([{**job, **job["partner"]}] if job.get("partner") else []):
            stalled = side["commit"] in self.regressed
            doc = document(side["commit"], self.config, sim_values(81.72, sf_blocks_pp=1.0 if stalled else 0.0),
                           self.agent["fingerprint"], MACHINE)
            for sample in doc["samples"]:
                sample["raw"]["sim.hz_family.intel-spr"] = 1.0  # the store-buffer model the agent was set to
                if stalled:  # where memhazard saw them
                    sample["raw"][SITE] = sample["raw"].pop("sim.site.sf_blocks.ttl_decrement@fwd.c:104")
            upload = self.client.put(f"/api/v1/agent/jobs/{side['job_id']}/attempts/{side['attempt']}/result",
                                     content=json.dumps(doc), headers={**self.agent["headers"], "Content-Type": "application/json"})
            assert upload.status_code == 201, upload.text
            uploads += 1
        self.run_tasks()
        return uploads

    def run_tasks(self) -> None:
        """Run every task sent so far, in order, as a worker would (each in its own transactions)."""
        tasks = registered_tasks()
        while self.ran < len(self.sent):
            name, args = self.sent[self.ran]
            self.ran += 1
            tasks[name].apply(args=args)

    def statuses(self, sha: str) -> dict[str, dict[str, Any]]:
        """The newest status per context the forge received for a commit."""
        out = {}
        for r in self.forge.accepted():
            if r.path.endswith(f"/statuses/{sha}"):
                out[r.body["context"]] = r.body
        return out

    def comments(self) -> list[Any]:
        return [r for r in self.forge.accepted() if "/issues/" in r.path]
