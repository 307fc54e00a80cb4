"""`perfci alerts|check|compare` over HTTP against the real server (uvicorn on loopback, the
committed test database): exit codes CI can gate on, --json, triage from the command line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.alerts.alerts_support import committed_sim_lab
from perfci_cli.app import app
from tests.server.server_support import ADMIN
from tests.support.server import LiveServer

pytestmark = pytest.mark.services
STEP = 5
ADMIN_TOKEN = ADMIN["Authorization"].split()[1]


@pytest.fixture
def live(committed_client, sent_tasks):
    lab = committed_sim_lab(committed_client, sent_tasks, 9, STEP)
    lab.push(1)  # pushed, not measured yet
    served = LiveServer()
    lab.url = served.url
    yield lab
    served.stop()
    lab.session.close()


def perfci(lab, *args, token=ADMIN_TOKEN):
    env = {"PERFCI_SERVER_URL": lab.url, "PERFCI_TOKEN": token or "", "COLUMNS": "200"}
    return CliRunner().invoke(app, list(args), env=env)


def test_alerts_list_show_and_triage_from_the_command_line(live):
    listed = perfci(live, "alerts", "list", "--json")
    assert listed.exit_code == 0, listed.output
    [group] = json.loads(listed.output)["items"]
    table = perfci(live, "alerts", "list", "--status", "untriaged")
    assert table.exit_code == 0 and str(group["id"]) in table.output and "ipp +2.90 %" in table.output
    shown = perfci(live, "alerts", "show", str(group["id"]))
    assert shown.exit_code == 0, shown.output
    assert live.shas["main"][STEP] in shown.output and "cause instructions" in shown.output and "(simulated)" in shown.output
    assert perfci(live, "alerts", "list", "--status", "fixed", "--json").output.count('"id"') == 0
    assert perfci(live, "alerts", "show", "999999").exit_code == 2
    assert perfci(live, "alerts", "list", "--status", "closed").exit_code == 2  # the server's 422, said plainly

    acked = perfci(live, "alerts", "ack", str(group["id"]), "--note", "expected: checksum moved to software", "--by", "ada", "--json")
    assert acked.exit_code == 0, acked.output
    body = json.loads(acked.output)
    assert (body["status"], body["triage_note"], body["triaged_by"]) == ("acknowledged", "expected: checksum moved to software", "ada")
    refused = perfci(live, "alerts", "fixed", str(group["id"]), token="not-a-token")
    assert refused.exit_code == 2 and "401" in refused.output


def test_check_exit_codes_gate_ci(live):
    shas = live.shas["main"]
    bad = perfci(live, "check", "--commit", shas[STEP], "--repository", "perfci-org/dataplane", "--machine", "dut-01")
    assert bad.exit_code == 1, bad.output
    assert "regressed" in bad.output and "perfci alerts show" in bad.output
    clean = perfci(live, "check", "--commit", shas[STEP + 1], "--json")
    assert clean.exit_code == 0 and json.loads(clean.output)["state"] == "clean"
    not_measured = perfci(live, "check", "--commit", shas[-1])
    assert not_measured.exit_code == 2 and "1 job(s) still queued" in not_measured.output
    unknown = perfci(live, "check", "--commit", "f" * 40)
    assert unknown.exit_code == 2 and "not known" in unknown.output
    assert perfci(live, "check", "--commit", shas[0], "--machine", "no-such-host").exit_code == 3
    [group] = json.loads(perfci(live, "alerts", "list", "--json").output)["items"]
    assert perfci(live, "alerts", "invalid", str(group["id"]), "--by", "ada").exit_code == 0
    assert perfci(live, "check", "--commit", shas[STEP]).exit_code == 0  # triaged: no longer gates


def test_compare_reports_the_regression_and_exits_1(live):
    shas = live.shas["main"]
    regressed = perfci(live, "compare", shas[STEP - 1], shas[STEP], "--repository", "perfci-org/dataplane", "--machine", "dut-01",
                       "--config", "sim-64B", "--json")
    assert regressed.exit_code == 1, regressed.output
    body = json.loads(regressed.output)
    assert body["regressed"] == ["ipp/sim"]
    ipp = next(m for m in body["metrics"] if m["metric"] == "ipp")
    assert (ipp["verdict"], ipp["change_pct"]) == ("different", pytest.approx(2.9))
    same = perfci(live, "compare", shas[0], shas[STEP - 1], "--repository", "perfci-org/dataplane", "--machine", "dut-01", "--config", "sim-64B")
    assert same.exit_code == 0 and "same" in same.output
    improved = perfci(live, "compare", shas[STEP], shas[0], "--repository", "perfci-org/dataplane", "--machine", "dut-01", "--config", "sim-64B")
    assert improved.exit_code == 0 and "DIFFERENT (better)" in improved.output
    missing = perfci(live, "compare", shas[0], shas[1], "--repository", "nope/nope", "--machine", "dut-01", "--config", "sim-64B")
    assert missing.exit_code == 2 and "no repository named 'nope/nope'" in missing.output
