"""`perfci compare --measure`'s minimum effect from the server's series: fetched over HTTP from the
real server (uvicorn on loopback, the committed test database), and a server that cannot answer
becomes a note instead of losing the measurement."""

from __future__ import annotations

import threading
import time

import pytest
import uvicorn

from tests.alerts.alerts_support import committed_sim_lab
from perfci_cli.commands.compare import _series_source
from perfci_core.analysis.min_effect import min_effect_of_series
from perfci_server.app import create_app
from tests.server.server_support import ADMIN

pytestmark = pytest.mark.services
ADMIN_TOKEN = ADMIN["Authorization"].split()[1]


@pytest.fixture
def live(committed_client, sent_tasks):
    lab = committed_sim_lab(committed_client, sent_tasks, 9, 5)
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    lab.url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    lab.server, lab.thread = server, thread
    yield lab
    server.should_exit = True
    thread.join(timeout=10)
    lab.session.close()


def test_the_series_comes_from_the_server_and_gives_the_minimum_effect(live):
    source = _series_source(live.url, ADMIN_TOKEN, "perfci-org/dataplane", "dut-01", "main", "sim-64B")
    points, where = source("ipp", "sim")
    assert len(points) == 9 and all(p.values for p in points)
    assert "server's series of ipp/sim on machine dut-01" in where
    learned = min_effect_of_series(points, where)
    assert learned.source == "series" and learned.points == 9
    missing, why = source("cpp", "tsc")  # measured by nobody: an empty series, the floor follows
    assert missing == [] and min_effect_of_series(missing, why).source == "floor"


def test_a_wrong_name_exits_before_anything_is_measured_and_a_lost_server_is_a_note(live):
    import typer

    with pytest.raises(typer.Exit) as exited:
        _series_source(live.url, ADMIN_TOKEN, "nope/nope", "dut-01", "main", "sim-64B")
    assert exited.value.exit_code == 2
    source = _series_source(live.url, ADMIN_TOKEN, "perfci-org/dataplane", "dut-01", "main", "sim-64B")
    live.server.should_exit = True  # the server goes away while the commits are being measured
    live.thread.join(timeout=10)
    points, where = source("ipp", "sim")
    assert points == [] and "not available" in where
    assert min_effect_of_series(points, where).source == "floor"
