"""Calibration of sim against pmu hazard metrics (issues 16, 33): the comparison of four result documents.

The sim documents were recorded on this machine; the pmu documents are made at test time by the
real pmu backend (:class:`PmuBackend` prepare + sample, perf output parsing, metric derivation)
from perf outputs and dataplane reports, with only the perf run itself replaced (no PMU here).
See fixtures/calibration/README.md for what is recorded and what is constructed.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from perfci_agent import calibration
from perfci_agent import events as ev
from perfci_agent import perfstat, runner
from perfci_agent.backends import pmu as pmu_backend
from perfci_agent.cpuinfo import CpuId
from perfci_core.result import BenchConfig, ResultDocument

FIXTURES = Path(__file__).parent / "fixtures"
CAL = FIXTURES / "calibration"
# The machine the sim documents were recorded on (their machine.cpu_* fields): AMD Zen 3.
ZEN3 = CpuId("AuthenticAMD", 25, 1, 1, "AMD EPYC", "0x1000065", frozenset())


def _sim(name: str) -> ResultDocument:
    return ResultDocument.model_validate_json((CAL / name).read_text())


def _sim_value(doc: ResultDocument) -> float:
    """sf_blocks_pp recomputed from the raw counts of the recorded sim document (not its metrics)."""
    raw = doc.samples[0].raw
    return raw["sim.sf_blocks"] / raw["sim.fwd_packets"]


def pmu_document(monkeypatch, sim_doc: ResultDocument, window_perf: str, *, sf_supported: bool = True, reps: int = 3) -> ResultDocument:
    """The pmu result the agent would write for ``sim_doc``'s commit on the same machine, when perf
    prints ``window_perf`` for each window: the real backend code, only the perf run replaced."""
    mapping = ev.mapping_for(ZEN3, False)
    supported = {k: e for k, e in mapping.events.items() if e and (sf_supported or k != "sf_blocks")}
    unsupported = {k: "none on this CPU" for k, e in mapping.events.items() if not e}
    if not sf_supported:
        unsupported["sf_blocks"] = "<not supported>"
    probe = ev.Probe("perf version 6.1.0", supported, unsupported, 0)
    reports = {True: json.loads((FIXTURES / "reports" / "idle.json").read_text()),
               False: json.loads((FIXTURES / "reports" / "forward-self-64B.json").read_text())}
    perf_text = {True: (CAL / "perf-idle-csv.txt").read_text(), False: window_perf}
    specs: list[str] = []

    def run_counted(spec: runner.RunSpec, event_spec: str, perf=None, fmt="csv", cpu_wide=True):
        specs.append(event_spec)
        text = perf_text[spec.idle]
        return pmu_backend.WindowRun(runner.RunResult(reports[spec.idle], "", "", 1.0, []), perfstat.parse(text), text)

    monkeypatch.setattr(pmu_backend, "run_counted", run_counted)
    backend = pmu_backend.PmuBackend(probe, mapping)
    cfg = BenchConfig()
    backend.prepare(Path("perfci-fwd"), 1, cfg, Path("."))
    samples = [backend.sample(Path("perfci-fwd"), 1, cfg, Path("."), rep) for rep in range(reps)]
    assert ("ls_bad_status2.stli_other" in specs[-1]) is sf_supported  # what the backend asked perf for
    now = datetime.now(timezone.utc)
    return ResultDocument(status="ok", commit=sim_doc.commit, build_id=f"{sim_doc.commit[:12]}-release", config=cfg,
                          backend="pmu", backend_reason="requested: pmu", machine=sim_doc.machine,
                          machine_id=sim_doc.machine_id, samples=samples, started_at=now, finished_at=now)


def _write(tmp_path: Path, docs: dict[str, ResultDocument | str]) -> dict[str, Path]:
    paths = {}
    for name, doc in docs.items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(doc if isinstance(doc, str) else doc.model_dump_json(by_alias=True, indent=2))
    return paths


@pytest.fixture
def documents(monkeypatch):
    sim_base, sim_reg = _sim("sim-baseline.json"), _sim("sim-regression-a.json")
    return {
        "sim-baseline": sim_base,
        "pmu-baseline": pmu_document(monkeypatch, sim_base, (CAL / "perf-window-baseline-csv.txt").read_text()),
        "sim-regression": sim_reg,
        "pmu-regression": pmu_document(monkeypatch, sim_reg, (CAL / "perf-window-regression-a-csv.txt").read_text()),
    }


def _args(paths: dict[str, Path]) -> list[str]:
    return [a for name, p in paths.items() for a in (f"--{name}", str(p))]


def _pmu_value(doc: ResultDocument, perf_file: str) -> float:
    """pmu sf_blocks_pp recomputed from the perf output and the dataplane report it was made from."""
    count = perfstat.lookup(perfstat.parse((CAL / perf_file).read_text()), "ls_bad_status2.stli_other")
    packets = json.loads((FIXTURES / "reports" / "forward-self-64B.json").read_text())["window"]["packets"]["rx"]
    return count.value / packets


def test_compares_medians_ratio_and_step(documents, tmp_path, capsys):
    paths = _write(tmp_path, documents)
    assert calibration.main([*_args(paths), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)

    sim_b, sim_r = _sim_value(documents["sim-baseline"]), _sim_value(documents["sim-regression"])
    pmu_b = _pmu_value(documents["pmu-baseline"], "perf-window-baseline-csv.txt")
    pmu_r = _pmu_value(documents["pmu-regression"], "perf-window-regression-a-csv.txt")
    assert sim_b == 0 and sim_r > 0  # recorded: the baseline has no block, regression (a) one per packet

    sf = out["metrics"][0]
    base, reg, step = sf["baseline"], sf["regression"], sf["step"]
    assert sf["metric"] == "sf_blocks_pp" and sf["unit"] == "blocks/packet" and sf["unavailable"] is None
    assert (base["commit"], reg["commit"]) == (documents["sim-baseline"].commit, documents["sim-regression"].commit)
    assert base["sim"] == sim_b and base["pmu"] == pytest.approx(pmu_b)
    assert base["ratio"] is None  # sim counts no block in the baseline: no ratio, not a division by zero
    assert reg["sim"] == sim_r and reg["pmu"] == pytest.approx(pmu_r)
    assert reg["ratio"] == pytest.approx(pmu_r / sim_r)
    assert step["sim"] == pytest.approx(sim_r - sim_b) and step["pmu"] == pytest.approx(pmu_r - pmu_b)
    assert step["ratio"] == pytest.approx((pmu_r - pmu_b) / (sim_r - sim_b))
    assert (base["sim_samples"], base["pmu_samples"]) == (2, 3)
    assert out["sim_family"] == "intel-icx" and out["sim_family_default"] is True
    # Zen 3 counts no split loads, split stores or 4K aliases: listed, with the reason, not compared
    others = {m["metric"]: m for m in out["metrics"][1:]}
    assert list(others) == ["split_loads_pp", "split_stores_pp", "alias_4k_pp"]
    assert all(m["baseline"] is None and "perf did not count its event on AMD EPYC" in m["unavailable"] for m in others.values())


def test_human_output_names_builds_ratio_and_the_default_model(documents, tmp_path, capsys):
    paths = _write(tmp_path, documents)
    assert calibration.main(_args(paths)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert calibration.main([*_args(paths), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"] == lines  # what the playbook prints
    reg = calibration.compare({(b, calibration.metrics.Backend(k)): paths[f"{k}-{b}"]
                               for b in calibration.BUILDS for k in ("sim", "pmu")}).metrics[0].regression
    assert lines[0].startswith(f"baseline {documents['sim-baseline'].commit[:12]}: sf_blocks_pp sim 0.0000")
    assert lines[0].endswith("pmu/sim n/a (sim is 0)")
    assert lines[1].endswith(f"pmu/sim {reg.ratio:.3f}")
    assert lines[2].startswith("sf_blocks_pp regression step: sim +1.0000")
    assert [line.split(":")[0] for line in lines[3:6]] == ["split_loads_pp", "split_stores_pp", "alias_4k_pp"]
    assert "default model intel-icx" in lines[6]


def test_pmu_without_the_store_forward_event_exits_3_and_says_so(documents, monkeypatch, tmp_path, capsys):
    documents["pmu-regression"] = pmu_document(monkeypatch, documents["sim-regression"],
                                               (FIXTURES / "perf" / "amd-zen5-csv.txt").read_text(), sf_supported=False)
    assert all(s.raw["pmu.sf_blocks"] is None for s in documents["pmu-regression"].samples)
    paths = _write(tmp_path, documents)
    assert calibration.main([*_args(paths), "--json"]) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{paths['pmu-regression']}: the pmu result of commit {documents['sim-regression'].commit[:12]} has no sf_blocks_pp" in captured.err
    assert "has no alias_4k_pp" in captured.err
    assert "<not supported>" in captured.err and "AMD EPYC" in captured.err


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("pmu-baseline", "{\"schema\": \"perfci.result/1\", \"status\": \"ok\"", "not a perfci result document"),
        ("pmu-baseline", "{\"schema\": \"perfci.result/1\"}", "not a perfci result document"),
        ("sim-regression", "[]", "not a perfci result document"),
    ],
)
def test_malformed_document_exits_2_naming_the_file(documents, tmp_path, capsys, name, content, message):
    documents[name] = content
    paths = _write(tmp_path, documents)
    assert calibration.main(_args(paths)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {paths[name]}: {message}")


def test_documents_that_do_not_pair_up_exit_2(documents, tmp_path, capsys):
    swapped = dict(documents, **{"pmu-baseline": documents["sim-baseline"]})
    assert calibration.main(_args(_write(tmp_path, swapped))) == 2
    assert "a sim result where a pmu result was expected" in capsys.readouterr().err

    crossed = dict(documents, **{"pmu-baseline": documents["pmu-regression"]})
    assert calibration.main(_args(_write(tmp_path, crossed))) == 2
    assert "the baseline documents measure different commits" in capsys.readouterr().err

    failed = documents["sim-regression"].model_copy(update={"status": "run_failed", "reason": "run 1/2 failed: memhazard"})
    assert calibration.main(_args(_write(tmp_path, dict(documents, **{"sim-regression": failed})))) == 2
    assert "the measurement did not succeed (run_failed: run 1/2 failed: memhazard)" in capsys.readouterr().err


def test_missing_file_exits_2(documents, tmp_path, capsys):
    paths = _write(tmp_path, documents)
    paths["sim-baseline"].unlink()
    assert calibration.main(_args(paths)) == 2
    assert f"error: {paths['sim-baseline']}: cannot read" in capsys.readouterr().err
