"""A sharing regression on a scaling config, through upload, detection and the explanation: the
serial fraction and the throughput at 4 lcores move, the 1-lcore figures do not. And a scaling
config on a 2-core agent: no serial fraction is stored, so none is alerted on, even when an
agent uploads one fitted from two lcore counts."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import text

from tests.alerts import alerts_support
from tests.alerts.alerts_support import TSC_HZ, Lab
from perfci_core.analysis.scaling import amdahl_pps, fit_serial_fraction

pytestmark = pytest.mark.services

SCALING = {"name": "self-64B-scaling", "backend": "tsc", "scaling": True, "packets": 500_000, "warmup": 50_000}
COUNTS = (1, 2, 4)  # a 4-core agent's: 1, 2, 4, ... up to its cores


def scaling_values(rng: np.random.Generator, serial: float, reps: int = 5, counts: tuple[int, ...] = COUNTS) -> dict[str, list[float]]:
    """Runs at each lcore count with 0.5 % noise each; every metric derived as the agent derives it
    (B only from three or more counts)."""
    pps1 = 38e6 * (1 + 0.005 * rng.standard_normal(reps))
    pps = {n: np.array([amdahl_pps(n, p, serial) for p in pps1]) * (1 + 0.005 * rng.standard_normal(reps)) for n in counts[1:]}
    n = counts[-1]
    cur = np.full(reps, 0.97)
    out = {"cpp": (TSC_HZ * cur / pps1).tolist(), "pps": pps1.tolist(), "cur": cur.tolist(),
           "pps_max_lcores": pps[n].tolist(), "scaling_efficiency": (pps[n] / (n * pps1)).tolist(),
           "roi_cpu": ((pps[n] / 1e6) ** 2 / (0.97 * n)).tolist()}
    if len(counts) >= 3:
        b = [fit_serial_fraction({1: pps1[r], **{k: pps[k][r] for k in counts[1:]}}).serial for r in range(reps)]
        out |= {"serial_fraction": b, "serial_fraction_low": [min(b)] * reps, "serial_fraction_high": [max(b)] * reps}
    return out


def test_a_shared_counter_is_one_group_worded_as_scaling(client, session, sent_tasks):
    lab = Lab(client, session, sent_tasks, configs=(SCALING,))
    agent = lab.agent("dut-01")
    rng = np.random.default_rng(11)
    step = 30
    lab.push(40)
    lab.measure(lambda i, _: scaling_values(rng, 0.31 if i >= step else 0.02), agent)
    lab.detect()
    [group] = lab.alerts()
    metrics = {a["metric"]: a for a in group["alerts"]}
    assert {"serial_fraction", "pps_max_lcores", "scaling_efficiency"} <= set(metrics)
    assert not {"pps", "cpp", "cur"} & set(metrics)  # one lcore did not move
    assert all(a["direction"] == "regression" for a in group["alerts"] if a["metric"] != "roi_cpu")
    assert not {"serial_fraction_low", "serial_fraction_high"} & set(metrics)  # the interval is context
    shas = lab.shas["main"]
    assert shas.index(group["last_good"]["sha"]) < step <= shas.index(group["first_bad"]["sha"])
    explanation = group["explanation"]
    assert explanation["cause"] == "scaling"
    assert explanation["sentence"].startswith("serial fraction 0.02 \u2192 0.31: throughput at 4 lcores fell 4"), explanation["sentence"]
    assert "while 1 lcore did not move" in explanation["sentence"]
    assert "serial fraction 0.02 \u2192 0.31" in group["summary"]


def stored_serial_fractions(session) -> int:
    return session.execute(text("SELECT count(*) FROM metric_values WHERE metric LIKE 'serial_fraction%'")).scalar_one()


def test_two_lcore_counts_store_and_alert_no_serial_fraction(client, session, sent_tasks, monkeypatch):
    """The same shared counter on a 2-core agent: throughput at 2 lcores falls and is alerted on; no
    serial fraction exists to alert on. An agent that still fits one from 1 and 2 lcores uploads it
    with its runs' raw counts: the result document (which validates every upload) drops it, so
    nothing is stored, and the group explains nothing with it."""
    fitted_from_two = {}
    plain = alerts_support.document

    def with_two_lcore_runs(commit, config, values, machine_id, machine):
        doc = plain(commit, config, values, machine_id, machine)
        for sample in doc["samples"]:
            rep = sample["rep"]
            pps1, pps2 = values["pps"][rep], values["pps_max_lcores"][rep]
            sample["raw"] |= {"lc.1.packets": 5e5, "lc.1.busy_cycles": 5e5 * 60, "lc.1.window_cycles": 5e5 * TSC_HZ / pps1,
                              "lc.2.packets": 5e5, "lc.2.busy_cycles": 5e5 * 70, "lc.2.window_cycles": 5e5 * TSC_HZ / pps2}
            b = 2 * pps1 / pps2 - 1  # what fitting B from 1 and 2 lcores gives
            fitted_from_two.setdefault(commit, b)
            sample["metrics"].append({"metric": "serial_fraction", "backend": "tsc", "value": b})
        return doc

    monkeypatch.setattr(alerts_support, "document", with_two_lcore_runs)
    lab = Lab(client, session, sent_tasks, configs=(SCALING,))
    agent = lab.agent("dut-01")
    rng = np.random.default_rng(11)
    step = 30
    lab.push(40)
    lab.measure(lambda i, _: scaling_values(rng, 0.31 if i >= step else 0.02, counts=(1, 2)), agent)
    lab.detect()
    assert max(fitted_from_two.values()) - min(fitted_from_two.values()) > 0.2  # the uploads carried a moving "B"
    assert stored_serial_fractions(session) == 0
    [group] = lab.alerts()
    metrics = {a["metric"] for a in group["alerts"]}
    assert {"pps_max_lcores", "scaling_efficiency"} <= metrics and not {m for m in metrics if m.startswith("serial_fraction")}
    assert "serial fraction" not in group["explanation"]["sentence"] and "serial fraction" not in group["summary"]
