"""`perfci plot`: rendering as a pure function of API-shaped data, and the whole command against
the real server (uvicorn on loopback) over the seeded PostgreSQL."""

from __future__ import annotations

import json
import random
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from matplotlib.transforms import Bbox
from typer.testing import CliRunner

from dashboards.sample_data import STEPS
from perfci_cli.commands.plot import PlotError, alert_marks, draw_trend, keep_since, parse_since, point_stats, render_trend
from perfci_cli.app import app as cli_app

ADMIN = "perfci-development-admin-token"


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    assert data[-8:-4] == b"IEND"
    return struct.unpack(">II", data[16:24])


def _series(points: int = 40, step_at: int = 25) -> dict:
    return {
        "repository_id": 1, "branch": "main", "machine_id": 1, "config": "self-64B", "metric": "ipp", "backend": "sim",
        "unit": "instructions/packet", "direction": "lower",
        "points": [{"position": p, "commit": f"{p:040x}", "committed_at": f"2026-06-{1 + p % 28:02d}T00:00:00+00:00",
                    "run_id": p, "samples": [{"rep": r, "value": 80.0 + (2.4 if p >= step_at else 0) + 0.01 * r} for r in range(3)]}
                   for p in range(points)],
        "next_after_position": None,
    }


GROUP = {  # shaped like the alerts contract
    "id": 7, "status": "untriaged", "direction": "regression", "first_bad": {"sha": "ab" * 20, "position": 25},
    "alerts": [{"config": "self-64B", "metric": "ipp", "backend": "sim", "direction": "regression", "change_pct": 3.0},
               {"config": "self-64B", "metric": "cpp", "backend": "pmu", "direction": "regression", "change_pct": 3.1}],
}


def test_render_is_a_png_of_the_requested_size(tmp_path):
    series = _series()
    marks = alert_marks([GROUP], "self-64B", "ipp", "sim")
    assert marks == [{"position": 25, "direction": "regression", "status": "untriaged", "change_pct": 3.0, "group": 7}]
    out = tmp_path / "trend.png"
    render_trend(series, marks, out, title="ipp", width_px=900, height_px=420)
    assert png_size(out) == (900, 420)
    assert out.stat().st_size > 10_000  # a drawn chart, not an empty canvas


def _dense_series(n: int = 500) -> dict:
    """A noisy series with steps, dense enough that a label anywhere near the data covers points."""
    rng = random.Random(3)
    points = []
    for i in range(n):
        level = 60.0 * (1.03 if i >= 200 else 1.0) * (0.98 if i >= 420 else 1.0)
        points.append({"position": i, "commit": f"{i:040x}",
                       "samples": [{"value": level * (1 + rng.gauss(0, 0.01))} for _ in range(5)]})
    return {"metric": "ipp", "branch": "main", "points": points}


def test_alert_labels_cover_no_data_point():
    """Geometry from matplotlib's renderer: every label box (its background included) against every
    plotted median, min and max, and against the other labels."""
    series = _dense_series()
    marks = [{"position": p, "direction": d, "status": "untriaged", "change_pct": c, "group": g}
             for g, (p, d, c) in enumerate([(200, "regression", 3.0), (203, "regression", 2.9), (210, "improvement", -1.2),
                                            (420, "improvement", -2.0), (497, "regression", 1.5), (2, "regression", 4.0)])]
    figure = draw_trend(series, marks, title="ipp", width_px=900, height_px=420)
    figure.canvas.draw()  # label background boxes are laid out at draw time
    renderer = figure.canvas.get_renderer()
    [axes] = figure.axes
    labels = [t for t in axes.texts]
    assert len(labels) == len(marks)
    boxes = [Bbox.union([t.get_window_extent(renderer), t.get_bbox_patch().get_window_extent(renderer)]) for t in labels]
    marker_px = 4.5 * figure.dpi / 72  # the largest marker drawn on a data point (the alert triangle's half height)
    points = [(r[0], v) for r in point_stats(series) for v in r[2:]]
    drawn = axes.transData.transform(points)
    for box, label in zip(boxes, labels):
        grown = box.expanded(1, 1).padded(marker_px)
        covered = [points[i] for i, (x, y) in enumerate(drawn) if grown.contains(x, y)]
        assert not covered, f"label {label.get_text()!r} covers {covered[:3]}"
        assert axes.bbox.contains(box.x0, box.y0) and axes.bbox.contains(box.x1, box.y1), label.get_text()
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), "two labels overlap"


def test_point_stats_and_since():
    rows = point_stats(_series(points=3))
    assert rows[0][0] == 0 and rows[0][2] == 80.0 and rows[0][3] == 80.01 and rows[0][4] == 80.02
    since = parse_since("2026-06-20", now=None)  # an absolute date needs no "now"
    kept = keep_since(_series(), since)["points"]
    assert kept and all(p["committed_at"] >= "2026-06-20" for p in kept)
    with pytest.raises(PlotError):
        parse_since("last tuesday", now=None)
    with pytest.raises(PlotError):
        render_trend({**_series(), "points": []}, [], Path("unused.png"), title="x")


# --- through the real server ------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def api_url(seeded_db) -> Iterator[str]:
    """The results service on loopback, its sessions inside the seeded transaction."""
    import uvicorn
    from sqlalchemy.orm import Session

    from perfci_server.app import create_app
    from perfci_server.deps import get_session
    from perfci_server.settings import get_settings

    connection = seeded_db[0]
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PERFCI_ENV", "development")
        env.delenv("PERFCI_ADMIN_TOKEN", raising=False)
        get_settings.cache_clear()
        app = create_app()

        def _session():
            with Session(bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False) as session:
                yield session

        app.dependency_overrides[get_session] = _session
        port = _free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
        server.should_exit = True
        thread.join(timeout=10)
    get_settings.cache_clear()


def _plot(api_url: str, *args: str):
    return CliRunner().invoke(cli_app, ["plot", "--server", api_url, "--token", ADMIN, *args])


def _has_alerts_api(api_url: str) -> bool:
    import httpx

    return httpx.get(f"{api_url}/api/v1/openapi.json").json()["paths"].get("/api/v1/alerts") is not None


def test_plot_from_the_server(api_url, seeded_db, tmp_path):
    _, seeded, _ = seeded_db
    out = tmp_path / "ipp.png"
    result = _plot(api_url, "--metric", "ipp", "--machine", "ci-vm-01", "--config", "pcap-64B", "-o", str(out),
                   "--width", "1000", "--height", "450", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert png_size(out) == (1000, 450)
    assert (summary["points"], summary["first_position"], summary["last_position"]) == (500, 0, 499)
    assert summary["backend"] == "sim"  # auto: ipp is not measured by pmu on this machine, sim is
    if _has_alerts_api(api_url):
        ipp_steps = [s for s in STEPS if s.ipp != 1.0]
        assert summary["alerts"] == len(ipp_steps) and summary["warnings"] == []
    else:  # this branch's server has no alerts router yet: the plot says so and draws without markers
        assert summary["alerts"] == 0
        assert summary["warnings"] == ["the server has no alerts API (GET /api/v1/alerts: 404): no alert markers"]
        assert "no alert markers" in result.stderr


def test_plot_since_and_backend(api_url, seeded_db, tmp_path):
    _, _, now = seeded_db
    out = tmp_path / "cpp.png"
    result = _plot(api_url, "--metric", "cpp", "--machine", "dut-01", "--backend", "pmu", "--since", "30d", "-o", str(out), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    # commits are ~4 h apart: 30 days is ~180 of the 500 (rebased commits dated a day early drop out)
    assert 150 < summary["points"] < 190 and summary["last_position"] == 499
    assert png_size(out) == (1200, 500)


@pytest.mark.parametrize("args, message", [
    (["--metric", "ipp", "--machine", "nope"], "no machine 'nope'; known: ci-vm-01, dut-01, dut-02"),
    (["--metric", "bogus", "--machine", "dut-01"], "unknown metric 'bogus'"),
    (["--metric", "ipp", "--machine", "dut-01", "--config", "nope"], "no config 'nope'"),
    (["--metric", "ipp", "--machine", "dut-01", "--branch", "nope"], "no branch 'nope'"),
    (["--metric", "eipc", "--machine", "dut-01", "--backend", "sim"], "eipc is not measured by backend 'sim'"),
    (["--metric", "eipc", "--machine", "ci-vm-01"], "no eipc measurements of ci-vm-01"),
    (["--metric", "ipp", "--machine", "dut-01", "--since", "yesterday"], "--since 'yesterday'"),
])
def test_bad_input_exits_2_with_a_message(api_url, tmp_path, args, message):
    out = tmp_path / "x.png"
    result = _plot(api_url, *args, "-o", str(out))
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.stderr.split())
    assert not out.exists()


def test_unreachable_server_exits_1(tmp_path):
    result = CliRunner().invoke(cli_app, ["plot", "--server", f"http://127.0.0.1:{_free_port()}", "--metric", "ipp",
                                          "--machine", "dut-01", "-o", str(tmp_path / "x.png")])
    assert result.exit_code == 1 and "server error" in result.stderr


def test_output_must_be_png(tmp_path):
    result = CliRunner().invoke(cli_app, ["plot", "--metric", "ipp", "--machine", "dut-01", "-o", str(tmp_path / "x.jpg")])
    assert result.exit_code == 2 and ".png" in result.stderr
