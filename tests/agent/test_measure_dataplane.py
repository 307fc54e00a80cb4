"""End to end against the real dataplane: sim at two commits, tsc, window-gated perf, failures."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfci_agent import runner
from perfci_agent.backends.pmu import run_counted
from perfci_agent.errors import BuildFailed, RunFailed
from perfci_agent.measure import CONFIGS, default_core, measure
from perfci_agent.workspace import Workspace
from perfci_core import metrics
from perfci_core.result import ResultDocument

pytestmark = pytest.mark.dataplane
HELPER = Path(__file__).parent / "helpers" / "window_child.py"
PERFCI = str(Path(sys.executable).parent / "perfci")  # the console script (pyproject [project.scripts])


def git_out(repo, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def ipps(doc: ResultDocument) -> list[float]:
    return [m.value for s in doc.samples for m in s.metrics if m.metric == "ipp" and m.backend == metrics.Backend.SIM]


def test_sim_shows_the_regression_and_is_bit_repeatable(scratch_repo):
    r = scratch_repo
    base = measure(r["repo"], r["base"], backend="sim", reps=2, cache_dir=r["cache"])
    assert base.status == "ok", base.reason
    assert base.backend == metrics.Backend.SIM and base.config.packets == 100_000 and base.config.warmup == 2_000
    b = ipps(base)
    assert len(b) == 2 and b[0] == b[1]  # identical run to run
    raws = [s.raw for s in base.samples]
    assert raws[0]["sim.fwd_instructions"] == raws[1]["sim.fwd_instructions"]
    # memhazard: every hazard count and site identical too, although the two runs had other file
    # prefixes and report paths (argv lengths) -- the padded environment keeps the stack in place
    hazards = [{k: v for k, v in raw.items() if k.startswith(("sim.sf_", "sim.split_", "sim.alias_", "sim.site.", "sim.loads", "sim.stores"))}
               for raw in raws]
    assert hazards[0] == hazards[1] and "sim.alias_4k" in hazards[0] and "sim.sf_blocks" in hazards[0]
    assert any(k.startswith("sim.hz_family.") for k in raws[0])
    assert raws[0]["sim.d1_misses"] == raws[1]["sim.d1_misses"]  # cachegrind's stack is pinned the same way
    assert all(s.raw["sim.d1_misses"] is not None for s in base.samples)
    regressed = measure(r["repo"], r["regressed"], backend="sim", reps=1, cache_dir=r["cache"])
    assert regressed.status == "ok", regressed.reason
    (after,) = ipps(regressed)
    assert after > b[0] * 1.005, (b[0], after)  # the out-of-line helper costs instructions per packet
    again = measure(r["repo"], r["base"], backend="sim", reps=1, cache_dir=r["cache"], reuse=False)
    assert ipps(again) == [b[0]]  # same commit, fresh processes, warm build cache: same IPP


ADDRESS_DEPENDENT = ("sim.fwd_instructions", "sim.sf_", "sim.split_", "sim.alias_", "sim.site.", "sim.loads", "sim.stores",
                     "sim.d1_misses", "sim.ll_misses")


def test_one_count_per_commit_whatever_the_cache_directory(scratch_repo, tmp_path):
    """The same commit built in two cache directories, one given relative to another working
    directory and far longer: the same hazards, sites and cache misses (the stage hides the paths)."""
    r = scratch_repo
    here = measure(r["repo"], r["base"], backend="sim", reps=1, cache_dir=r["cache"], reuse=False)
    elsewhere = tmp_path / ("elsewhere-" + "x" * 90)
    elsewhere.mkdir()
    cli = subprocess.run([PERFCI, "measure", "--repo", str(r["repo"]), "--commit", r["base"], "--backend", "sim", "--reps", "1",
                          "--cache-dir", "relative/cache", "--json"], cwd=elsewhere, capture_output=True, text=True, timeout=900)
    assert cli.returncode == 0, cli.stderr
    there = ResultDocument.model_validate_json(cli.stdout)
    assert there.reused_from is None  # a new cache keeps no counts yet
    assert Workspace(r["repo"], elsewhere / "relative" / "cache").build(r["base"]).cached  # the build went where asked
    a, b = ({k: v for k, v in doc.samples[0].raw.items() if k.startswith(ADDRESS_DEPENDENT)} for doc in (here, there))
    assert a == b and a["sim.alias_4k"] > 0 and any(k.startswith("sim.site.") for k in a)


def test_tsc_end_to_end_and_identity(scratch_repo):
    r = scratch_repo
    doc = measure(r["repo"], r["base"], backend="tsc", reps=3, config="self-64B-short", cache_dir=r["cache"])
    assert doc.status == "ok" and len(doc.samples) == 3 and doc.backend == metrics.Backend.TSC
    assert len(doc.machine_id) == 64 and doc.machine["core"] == default_core()
    for s in doc.samples:
        d = {m.metric: m.value for m in s.metrics}
        # roi_cpu: T²/ΣCPU of the run; the energy metrics only where RAPL is readable (else doc.unavailable says why)
        assert {"cpp", "pps", "cur", "roi_cpu"} <= set(d) <= {"cpp", "pps", "cur", "roi_cpu", "power_w", "energy_per_packet", "roi_power", "other_cpus_busy"}
        assert ("power_w" in d) != ("energy" in doc.unavailable)
        assert d["pps"] == pytest.approx(s.raw["tsc.tsc_hz"] * d["cur"] / d["cpp"], rel=1e-9)
        assert s.raw["tsc.packets"] == CONFIGS["self-64B-short"].packets
    ResultDocument.model_validate_json(doc.model_dump_json(by_alias=True))


def test_build_failure_is_a_result_with_the_log_tail(scratch_repo):
    r = scratch_repo
    doc = measure(r["repo"], r["broken"], backend="tsc", reps=1, cache_dir=r["cache"])
    assert doc.status == "build_failed" and not doc.samples
    assert "compile failed" in doc.reason and "fwd.c" in doc.log_tail
    cli = subprocess.run([PERFCI, "measure", "--repo", str(r["repo"]), "--commit", r["broken"],
                          "--backend", "tsc", "--cache-dir", str(r["cache"]), "--json"], capture_output=True, text=True, timeout=300)
    assert cli.returncode == 1 and "Traceback" not in cli.stderr
    assert json.loads(cli.stdout)["status"] == "build_failed"


def test_only_the_commits_own_build_failures_are_cached_and_rebuild_drops_them(scratch_repo, tmp_path, monkeypatch):
    r = scratch_repo
    cache = tmp_path / "cache"
    # a commit without dataplane/: its own failure, recorded
    empty_tree = git_out(r["repo"], "hash-object", "-t", "tree", "/dev/null")
    empty = git_out(r["repo"], "commit-tree", empty_tree, "-p", r["base"], "-m", "no dataplane")
    doc = measure(r["repo"], empty, backend="tsc", reps=1, cache_dir=cache)
    assert doc.status == "build_failed" and "no dataplane/meson.build at this commit" in doc.reason
    # no meson on the PATH: this machine's failure, an error, and nothing recorded for the commit
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "git").symlink_to(shutil.which("git"))
    with monkeypatch.context() as m:
        m.setenv("PATH", str(tools))
        with pytest.raises(BuildFailed, match="meson is not installed"):
            measure(r["repo"], r["base"], backend="tsc", reps=1, config="self-64B-short", cache_dir=cache)
    key = Workspace(r["repo"], cache).key(r["base"])
    assert not (cache / "builds" / key.digest / "status.json").exists()
    # a failure recorded for a key that builds (a poisoned cache): --rebuild drops it
    (cache / "builds" / key.digest).mkdir(parents=True, exist_ok=True)
    (cache / "builds" / key.digest / "status.json").write_text(json.dumps({"status": "build_failed", "reason": "stale"}))
    assert measure(r["repo"], r["base"], backend="tsc", reps=1, config="self-64B-short", cache_dir=cache).status == "build_failed"
    cli = subprocess.run([PERFCI, "measure", "--repo", str(r["repo"]), "--commit", r["base"], "--backend", "tsc", "--reps", "1",
                          "--config", "self-64B-short", "--cache-dir", str(cache), "--rebuild", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert cli.returncode == 0, cli.stderr
    assert json.loads((cache / "builds" / key.digest / "status.json").read_text())["status"] == "ok"


def test_cli_bad_input_exits_2(scratch_repo, tmp_path):
    r = scratch_repo
    def cli(*args):
        return subprocess.run([PERFCI, "measure", *args], capture_output=True, text=True, timeout=120)
    out = cli("--repo", str(r["repo"]), "--commit", "no-such-rev")
    assert out.returncode == 2 and "unknown commit 'no-such-rev'" in out.stderr and "Traceback" not in out.stderr
    out = cli("--repo", str(tmp_path))
    assert out.returncode == 2 and "not a git repository" in out.stderr
    out = cli("--repo", str(r["repo"]), "--config", "nope")
    assert out.returncode == 2 and "unknown config" in out.stderr
    out = cli("--repo", str(r["repo"]), "--commit", r["base"], "--backend", "sim", "--sim-family", "zen9", "--cache-dir", str(r["cache"]))
    assert out.returncode == 2 and "unknown store-buffer family 'zen9'" in out.stderr



def test_cli_table(scratch_repo):
    r = scratch_repo
    out = subprocess.run([PERFCI, "measure", "--repo", str(r["repo"]), "--commit", r["base"],
                          "--backend", "tsc", "--reps", "2", "--config", "self-64B-short", "--cache-dir", str(r["cache"])],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "160"})
    assert out.returncode == 0, out.stderr
    assert "cycles/packet" in out.stdout and "min – max" in out.stdout and "tsc" in out.stdout


def test_run_failures_are_reported(scratch_repo):
    r = scratch_repo
    measure(r["repo"], r["base"], backend="tsc", reps=1, config="self-64B-short", cache_dir=r["cache"])
    binary = Workspace(r["repo"], r["cache"]).build(r["base"]).binary
    huge = CONFIGS["self-64B"].model_copy(update={"packets": 10**12})
    with pytest.raises(RunFailed, match="timed out after 1 s"):
        runner.run(runner.RunSpec(binary, default_core(), huge, timeout=1.0))
    runtime = runner.eal_runtime_dir("any").parent
    assert not list(runtime.glob(f"perfci-{os.getpid():07d}-*")), "the killed run left its EAL runtime files"
    bad = CONFIGS["self-64B"].model_copy(update={"routes": "no/such/routes.txt"})
    with pytest.raises(RunFailed, match="exit status 2"):
        runner.run(runner.RunSpec(binary, default_core(), bad, timeout=30.0))


def test_perf_window_gating_with_a_software_event(scratch_repo):
    """The pmu backend's counting path, for real: perf -D -1 --control fd, enabled by the dataplane."""
    r = scratch_repo
    measure(r["repo"], r["base"], backend="tsc", reps=1, config="self-64B-short", cache_dir=r["cache"])
    binary = Workspace(r["repo"], r["cache"]).build(r["base"]).binary
    cfg = CONFIGS["self-64B"].model_copy(update={"packets": 20_000_000, "warmup": 100_000})
    run = run_counted(runner.RunSpec(binary, default_core(), cfg, timeout=120.0), "task-clock,context-switches")
    task = {c.event: c for c in run.counts}["task-clock"]
    window_ms = run.result.report["window"]["cycles"]["window"] / run.result.report["tsc_hz"] * 1e3
    assert task.status == "ok" and task.running_pct == 100.0
    # counted only inside the window: about the window's length, far below the process's life (EAL init etc.)
    assert 0.5 * window_ms < task.value < 1.5 * window_ms + 20, (task.value, window_ms, run.result.elapsed)
    assert task.value < run.result.elapsed * 1e3 * 0.9


def test_perf_control_protocol_with_a_stand_in_child(tmp_path):
    """The FIFO dance of docs/design.md ("These machines") with a tiny child (0.3 s spin, 0.2 s window, 0.3 s spin)."""
    import os
    ctl_p, ack_p, out = tmp_path / "ctl", tmp_path / "ack", tmp_path / "perf.csv"
    os.mkfifo(ctl_p)
    os.mkfifo(ack_p)
    ctl, ack = os.open(ctl_p, os.O_RDWR), os.open(ack_p, os.O_RDWR)
    try:
        subprocess.run(["perf", "stat", "-x,", "-o", str(out), "-e", "task-clock", "-D", "-1", "--control", f"fd:{ctl},{ack}", "--",
                        sys.executable, str(HELPER), str(ctl), str(ack), "0.3", "0.2"], pass_fds=(ctl, ack), check=True, timeout=60,
                       capture_output=True)
    finally:
        os.close(ctl)
        os.close(ack)
    from perfci_agent import perfstat
    (task,) = perfstat.parse(out.read_text())
    assert 20 < task.value < 400  # ~200 ms window of an ~800 ms process
