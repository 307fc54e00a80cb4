"""Explanations on the row they explain, through the API: a pull request's comment gives each metric that
moved its own why (IPP by the functions whose instructions moved, store-forward blocks by every site,
never a 4K-alias row), says "improvement" when that is all there is, and an alert group keeps each
alerted metric's why; a serial fraction's alert names the line sharing a ``sim`` config saw move.

The simulated samples carry the raw keys the sim backend records for the dataplane's regressions
(tests/analysis/fixtures/sim_regressions.json: the base, (d), (f) with (a), (g) on two lcores).
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pytest

from tests.alerts import alerts_support
from tests.alerts.alerts_support import SIM, SIM_PACKETS, Lab, document, sim_values
from tests.alerts.pull_world import MACHINE, World
from tests.alerts.test_scaling_alerts import SCALING, scaling_values

pytestmark = pytest.mark.services

ZERO = "0" * 40

BASE = {"ipp": 59.03, "sf_blocks_pp": 0.0, "alias_4k_pp": 0.17,
        "raw": {"sim.fn.fwd_burst": 51.97, "sim.fn.??? (librte_net_ring.so.23.0)": 7.06}}
# (d) and (f)+(a) in one head: the helper out of line, and two blocked loads per packet
HEAD = {"ipp": 62.03, "sf_blocks_pp": 2.0, "alias_4k_pp": 0.06,
        "raw": {"sim.fn.fwd_burst": 48.97, "sim.fn.ttl_decrement": 6.0, "sim.fn.??? (librte_net_ring.so.23.0)": 7.06,
                "sim.site.sf_blocks.mac_rewrite@fwd.c:121": 1.0, "sim.site.sf_blocks.ttl_decrement@fwd.c:105": 1.0}}
FASTER = {"ipp": 56.03, "sf_blocks_pp": 0.0, "alias_4k_pp": 0.17,
          "raw": {"sim.fn.fwd_burst": 48.97, "sim.fn.??? (librte_net_ring.so.23.0)": 7.06}}


def sim_document(commit: str, config: dict[str, Any], shape: dict[str, Any], agent: dict[str, Any]) -> dict[str, Any]:
    """A sim result of ``shape``: its metric values, and raw keys per packet (made totals here)."""
    values = sim_values(shape["ipp"], sf_blocks_pp=shape["sf_blocks_pp"], alias_4k_pp=shape["alias_4k_pp"])
    doc = document(commit, config, values, agent["fingerprint"], MACHINE)
    for sample in doc["samples"]:
        sample["raw"] = {k: v for k, v in sample["raw"].items() if not k.startswith("sim.site.")}
        sample["raw"].update({k: v * SIM_PACKETS for k, v in shape["raw"].items()})
    return doc


def measure(world: World, shapes: dict[str, dict[str, Any]]) -> int:
    """Claim and upload every queued job (both sides of a pair), each commit measured as its shape."""
    uploads = 0
    while (claim := world.client.post("/api/v1/agent/jobs/claim", headers=world.agent["headers"])).status_code == 200:
        job = claim.json()
        for side in [job] + ([{**job, **job["partner"]}] if job.get("partner") else []):
            doc = sim_document(side["commit"], world.config, shapes.get(side["commit"], BASE), world.agent)
            upload = world.client.put(f"/api/v1/agent/jobs/{side['job_id']}/attempts/{side['attempt']}/result",
                                      content=json.dumps(doc), headers={**world.agent["headers"], "Content-Type": "application/json"})
            assert upload.status_code == 201, upload.text
            uploads += 1
    world.run_tasks()
    return uploads


def pull_request_of(world: World, head_shape: dict[str, Any]) -> tuple[str, str]:
    """main (2 commits) and a branch of one commit measured as ``head_shape``; the pull request opened
    and measured. Returns (merge-base, head)."""
    main = world.git.commit(2)
    world.push("main", ZERO, main)
    measure(world, {})
    world.git.git("checkout", "--quiet", "-b", "feature")
    [head] = world.git.commit(1, "fwd: the TTL helper out of line")
    world.push("feature", ZERO, [head])
    measure(world, {head: head_shape})
    world.pull_request("opened", 11, "feature", head)
    assert measure(world, {head: head_shape}) == 2
    return main[-1], head


def comment_rows(world: World) -> dict[str, list[str]]:
    """The comment's table rows by metric, each cell as a reader sees it (Markdown escapes applied)."""
    body = world.comments()[-1].body["body"]
    rows = [re.split(r"(?<!\\) \| ", line) for line in body.splitlines() if line.startswith("| dut-01 |")]
    return {cells[2]: [re.sub(r"\\(.)", r"\1", cell) for cell in cells] for cells in rows}


def test_each_row_of_the_comment_says_what_moved_that_metric(world):
    base, head = pull_request_of(world, HEAD)
    status = world.statuses(head)["perfci/pr/dut-01/main"]
    assert status["state"] == "failure" and status["description"].startswith("regression: sf_blocks_pp from zero")
    rows = comment_rows(world)
    assert set(rows) == {"ipp", "sf_blocks_pp"}  # the 4K aliases moved too (0.17 -> 0.06), with the layout: no row
    assert rows["ipp"][-1] == ("IPP +5.1 % (59.03 \u2192 62.03 instructions per packet: +6.0 in ttl_decrement (new), "
                               "\u22123.0 in fwd_burst) |")
    assert rows["sf_blocks_pp"][-1] == ("store-forward blocks per packet from zero (0 \u2192 2): +1.0 in mac_rewrite "
                                        "(fwd.c:121), +1.0 in ttl_decrement (fwd.c:105) |")
    body = world.comments()[-1].body["body"]
    assert "alias" not in body and "4K" not in body
    assert body.startswith(f"### perfci: regression — head `{head[:12]}` against merge-base `{base[:12]}`")


def test_a_head_that_only_improved_says_improvement(world):
    base, head = pull_request_of(world, FASTER)
    status = world.statuses(head)["perfci/pr/dut-01/main"]
    assert status["state"] == "success"
    assert status["description"] == f"improvement: ipp -5.08% (sim-64B, sim) vs merge-base {base[:12]}"
    body = world.comments()[-1].body["body"]
    assert body.startswith(f"### perfci: improvement — head `{head[:12]}`")
    assert comment_rows(world)["ipp"][-1] == "IPP \u22125.1 % (59.03 \u2192 56.03 instructions per packet: \u22123.0 in fwd_burst) |"


# --- alert groups ------------------------------------------------------------------------------------


def raw_by_commit(lab: Lab, monkeypatch, extra: Any) -> None:
    """Documents of ``lab`` get ``extra(commit index, config name)`` raw keys per packet (made totals)."""
    plain = alerts_support.document

    def with_raw(commit: str, config: dict[str, Any], values: dict[str, list[float]], machine_id: str,
                 machine: dict[str, Any]) -> dict[str, Any]:
        doc = plain(commit, config, values, machine_id, machine)
        for sample in doc["samples"]:  # the sites are the shape's own
            sample["raw"] = {k: v for k, v in sample["raw"].items() if not k.startswith("sim.site.")}
            sample["raw"].update({k: v * SIM_PACKETS for k, v in extra(lab.shas["main"].index(commit), config["name"]).items()})
        return doc

    monkeypatch.setattr(alerts_support, "document", with_raw)


def test_an_alert_keeps_every_site_and_each_metrics_own_why(client, session, sent_tasks, monkeypatch):
    lab = Lab(client, session, sent_tasks)
    agent = lab.agent("dut-01")
    step = 12
    raw_by_commit(lab, monkeypatch, lambda i, _: (HEAD if i >= step else BASE)["raw"])
    lab.push(20)
    lab.measure(lambda i, _: sim_values(**{k: (HEAD if i >= step else BASE)[k] for k in ("ipp", "sf_blocks_pp", "alias_4k_pp")}),
                agent)
    lab.detect()
    [group] = lab.alerts()
    assert {a["metric"] for a in group["alerts"]} == {"ipp", "sf_blocks_pp"}  # 4K aliases do not alert
    [part] = group["explanation"]["parts"]
    assert part["whys"] == {
        "ipp": "IPP +5.1 % (59.03 \u2192 62.03 instructions per packet: +6.0 in ttl_decrement (new), \u22123.0 in fwd_burst)",
        "sf_blocks_pp": "store-forward blocks per packet from zero (0 \u2192 2): +1.0 in mac_rewrite (fwd.c:121), "
                        "+1.0 in ttl_decrement (fwd.c:105)"}
    sentence = group["explanation"]["sentence"]
    assert sentence.startswith(part["whys"]["ipp"] + ": " + part["whys"]["sf_blocks_pp"]), sentence
    assert "4K" not in sentence
    assert "+1.0 in mac_rewrite (fwd.c:121), +1.0 in ttl_decrement (fwd.c:105)" in group["summary"]


SIM_TWO_LCORES = {**SIM, "name": "sim-64B-2lcores", "lcores": 2}
SHARING_BASE = {"line_transfers_pp": 0.0238, "read_transfers_pp": 0.0238}
SHARING_G = {"line_transfers_pp": 0.5962, "read_transfers_pp": 0.0238}


def test_a_serial_fraction_alert_names_the_line_sharing_sites_sim_saw(client, session, sent_tasks, monkeypatch):
    lab = Lab(client, session, sent_tasks, configs=(SCALING, SIM_TWO_LCORES))
    agent = lab.agent("dut-01")
    rng = np.random.default_rng(5)
    step = 30

    def raw(i: int, config: str) -> dict[str, float]:
        if config != SIM_TWO_LCORES["name"]:
            return {}
        sites = {"sim.site.line_transfers.??? (librte_net_ring.so.23.0)": 0.0238,
                 "sim.site.read_transfers.??? (librte_net_ring.so.23.0)": 0.0238}
        return sites | ({"sim.site.line_transfers.forward_one@fwd.c:175": 0.5724} if i >= step else {})

    def values(i: int, config: str) -> dict[str, list[float]]:
        if config == SCALING["name"]:
            return scaling_values(rng, 0.31 if i >= step else 0.02)
        shared = SHARING_G if i >= step else SHARING_BASE
        return sim_values(60.02 if i >= step else 59.02) | {k: [v] for k, v in shared.items()}

    raw_by_commit(lab, monkeypatch, raw)
    lab.push(40)
    lab.measure(values, agent)
    lab.detect()
    groups = lab.alerts()
    [scaling] = [p for g in groups for p in g["explanation"]["parts"] if p["config"] == SCALING["name"]]
    sharing = "sim: line transfers per packet \u00d725.1 (0.024 \u2192 0.596) in forward_one (fwd.c:175)"
    assert scaling["sentence"].startswith("serial fraction 0.02 \u2192 0.31: throughput at 4 lcores fell 4"), scaling["sentence"]
    assert scaling["sentence"].endswith(f"while 1 lcore did not move; {sharing}"), scaling["sentence"]
    assert scaling["cause"] == "scaling"
    assert scaling["whys"]["serial_fraction"] == scaling["sentence"]
