"""A sharing regression on a scaling config, through upload, detection and the explanation: the
serial fraction and the throughput at 2 lcores move, the 1-lcore figures do not."""

from __future__ import annotations

import numpy as np
import pytest

from tests.alerts.alerts_support import TSC_HZ, Lab
from perfci_core.analysis.scaling import amdahl_pps, fit_serial_fraction

pytestmark = pytest.mark.services

SCALING = {"name": "self-64B-scaling", "backend": "tsc", "scaling": True, "packets": 500_000, "warmup": 50_000}


def scaling_values(rng: np.random.Generator, serial: float, reps: int = 5) -> dict[str, list[float]]:
    """Runs at 1 and 2 lcores with 0.5 % noise each; every metric derived as the agent derives it."""
    pps1 = 38e6 * (1 + 0.005 * rng.standard_normal(reps))
    pps2 = np.array([amdahl_pps(2, p, serial) for p in pps1]) * (1 + 0.005 * rng.standard_normal(reps))
    cur = np.full(reps, 0.97)
    b = [fit_serial_fraction({1: p1, 2: p2}).serial for p1, p2 in zip(pps1, pps2)]
    return {"cpp": (TSC_HZ * cur / pps1).tolist(), "pps": pps1.tolist(), "cur": cur.tolist(),
            "pps_max_lcores": pps2.tolist(), "scaling_efficiency": (pps2 / (2 * pps1)).tolist(), "serial_fraction": b,
            "serial_fraction_low": [min(b)] * reps, "serial_fraction_high": [max(b)] * reps,
            "roi_cpu": ((pps2 / 1e6) ** 2 / 1.94).tolist()}


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
    assert explanation["sentence"].startswith("serial fraction 0.02 \u2192 0.31: throughput at 2 lcores fell 2"), explanation["sentence"]
    assert "while 1 lcore did not move" in explanation["sentence"]
    assert "serial fraction 0.02 \u2192 0.31" in group["summary"]
