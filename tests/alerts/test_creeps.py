"""A creep on the server: cycles per packet rising 8 % over 200 commits (1 % per-run noise, seeded)
is one creep of its series over that range — no alert, no failed verdict — kept with its first-seen
time as later commits arrive, listed by the API and by `perfci alerts creeps`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from perfci_cli.app import app
from perfci_server import db
from tests.alerts.alerts_support import TSC, Lab, tsc_values
from tests.support.server import LiveServer

pytestmark = pytest.mark.services

COMMITS, RISE = 200, 0.08


def _creeping_lab(client, session, sent_tasks, flat_after: int = 0) -> Lab:
    lab = Lab(client, session, sent_tasks, configs=(TSC,))
    agent = lab.agent("dut-01")
    rng = np.random.default_rng(20261128)
    level = lambda i: 7.6 * (1 + RISE * min(i, COMMITS - 1) / (COMMITS - 1))  # noqa: E731
    lab.push(COMMITS)
    lab.measure(lambda i, _: tsc_values(rng, level(i), 0.01), agent)
    lab.detect()
    if flat_after:
        lab.push(flat_after)
        lab.measure(lambda i, _: tsc_values(rng, level(i), 0.01), agent)
        lab.detect()
    return lab


def _creeps(client, **filters) -> list[dict]:
    response = client.get("/api/v1/alerts/creeps", params={"limit": 100, **filters})
    assert response.status_code == 200, response.text
    return response.json()["items"]


def test_a_creep_is_one_finding_over_its_range_and_no_alert(client, session, sent_tasks):
    lab = _creeping_lab(client, session, sent_tasks)
    assert lab.alerts() == []
    [cpp] = _creeps(client, metric="cpp")
    assert (cpp["direction"], cpp["backend"], cpp["branch"], cpp["machine"], cpp["config"]) == ("regression", "tsc", "main", "dut-01", "self-64B")
    assert abs(cpp["change_pct"] - 100 * RISE) < 2.0 and cpp["p_value"] < 0.01
    assert cpp["first"]["position"] < 20 and cpp["last"]["position"] > COMMITS - 20
    assert cpp["commits"] == cpp["last"]["position"] - cpp["first"]["position"] + 1
    assert {c["metric"] for c in _creeps(client)} <= {"cpp", "pps"}  # packets per second fall as cycles rise
    gate = client.get("/api/v1/alerts/check", params={"commit": lab.shas["main"][-1], "machine": "dut-01"}).json()
    assert gate["state"] == "clean", gate  # no commit's verdict fails for a creep


def test_a_creep_seen_again_keeps_its_row_and_grows_with_the_commits(client, session, sent_tasks):
    lab = _creeping_lab(client, session, sent_tasks)
    [before] = _creeps(client, metric="cpp")
    lab.push(30)  # the level holds at the top: the ramp ends where it ended
    rng = np.random.default_rng(7)
    lab.measure(lambda i, _: tsc_values(rng, 7.6 * (1 + RISE), 0.01), lab.agent("dut-01"))
    lab.detect()
    [after] = _creeps(client, metric="cpp")
    assert (after["id"], after["created_at"]) == (before["id"], before["created_at"])
    assert lab.alerts() == []


@pytest.fixture
def live(committed_client, sent_tasks):
    lab = _creeping_lab(committed_client, db.new_session(), sent_tasks)
    served = LiveServer()
    yield served.url
    served.stop()
    lab.session.close()


def test_perfci_alerts_creeps_prints_them_as_json_and_as_a_table(live):
    runner = CliRunner()
    listed = runner.invoke(app, ["alerts", "creeps", "--server", live, "--metric", "cpp", "--json"])
    assert listed.exit_code == 0, listed.output
    [cpp] = json.loads(listed.output)["items"]
    assert cpp["metric"] == "cpp" and cpp["direction"] == "regression"
    table = runner.invoke(app, ["alerts", "creeps", "--server", live], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "creep(s)" in table.output and "cpp/tsc" in table.output and cpp["first"]["sha"][:10] in table.output
    none = runner.invoke(app, ["alerts", "creeps", "--server", live, "--branch", "no-such-branch"])
    assert none.exit_code == 0 and "0 creep(s)" in none.output, none.output
    unreachable = runner.invoke(app, ["alerts", "creeps", "--server", "http://127.0.0.1:9"])
    assert unreachable.exit_code == 3, unreachable.output
