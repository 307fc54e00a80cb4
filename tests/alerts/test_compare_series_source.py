"""`perfci compare --measure`'s minimum effect from the server's series: fetched over HTTP from the
real server (uvicorn on loopback, the committed test database), and a server that cannot answer
becomes a note instead of losing the measurement."""

from __future__ import annotations


import pytest

from tests.alerts.alerts_support import committed_sim_lab
from perfci_cli.commands.compare import _series_source
from perfci_core.analysis.min_effect import min_effect_of_series
from tests.server.server_support import ADMIN
from tests.support.server import LiveServer

pytestmark = pytest.mark.services
ADMIN_TOKEN = ADMIN["Authorization"].split()[1]


@pytest.fixture
def live(committed_client, sent_tasks):
    lab = committed_sim_lab(committed_client, sent_tasks, 9, 5)
    served = LiveServer()
    lab.url, lab.served = served.url, served
    yield lab
    served.stop()
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
    live.served.stop()  # the server goes away while the commits are being measured
    points, where = source("ipp", "sim")
    assert points == [] and "not available" in where
    assert min_effect_of_series(points, where).source == "floor"
