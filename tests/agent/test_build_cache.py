"""The build cache: one build per source tree (build inputs + toolchain), kept safe for concurrent
builders and older caches; and sim counts reused per binary, config and tool.

Most tests build a tiny meson project named like the dataplane (seconds per build, real meson,
ninja and git); one builds the real dataplane at two commits that differ only in its README and
runs valgrind on both.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from perfci_agent.backends.sim import SimBackend
from perfci_agent.backends.sim_reuse import SimCounts, identity
from perfci_agent.errors import BuildFailed
from perfci_agent.measure import CONFIGS, measure
from perfci_agent.workspace import Workspace, build_key, sources, toolchain
from perfci_core.metrics import Backend
from perfci_core.result import ResultDocument

FIXTURES = Path(__file__).parent / "fixtures"

TINY_MESON = """project('tiny', 'c')
build_id = vcs_tag(command: ['git', 'describe', '--always', '--dirty', '--abbrev=12'], fallback: 'unknown',
                   input: 'src/build_id.h.in', output: 'build_id.h')
executable('perfci-fwd', 'src/main.c', build_id)
"""
TINY_FILES = {
    "meson.build": TINY_MESON,
    "src/main.c": '#include <stdio.h>\n#include "build_id.h"\nint main(void) { puts(BUILD_ID); return 0; }\n',
    "src/build_id.h.in": '#define BUILD_ID "@VCS_TAG@"\n',
    "routes/example.txt": "10.0.0.0/8 0\n",
    "README.md": "# tiny\n",
    "regressions/a.patch": "--- a/src/main.c\n",
}


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(["git", "-c", "user.name=perfci test", "-c", "user.email=test@perfci.invalid", "-C", str(repo), *args],
                          check=True, capture_output=True, text=True, env=env).stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        path = repo / "dataplane" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def tiny(tmp_path) -> dict[str, object]:
    """A repository of the tiny project: base, a README edit, a regression-patch edit, a routes edit
    and a source edit, each on the one before."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = {"base": commit(repo, TINY_FILES, "base")}
    shas["readme"] = commit(repo, {"README.md": "# tiny\n\nMore words.\n"}, "docs")
    shas["patch"] = commit(repo, {"regressions/a.patch": "--- a/src/main.c\n+++ b/src/main.c\n"}, "a patch")
    shas["routes"] = commit(repo, {"routes/example.txt": "10.0.0.0/8 1\n"}, "routes")
    shas["source"] = commit(repo, {"src/main.c": TINY_FILES["src/main.c"] + "/* a comment */\n"}, "source")
    return {"repo": repo, **shas}


def finished(cache: Path) -> list[Path]:
    builds = cache / "builds"
    return sorted(d for d in builds.iterdir() if not d.name.startswith(".")) if builds.is_dir() else []


def files(directory: Path) -> list[str]:
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())


def test_commits_with_the_same_build_inputs_share_one_build(tiny):
    repo = tiny["repo"]
    ws = Workspace(repo)  # the default cache, <repo>/.perfci: inside the repository
    keys = {name: ws.key(tiny[name]) for name in ("base", "readme", "patch", "routes", "source")}
    # documentation, regression patches and routes files are no build inputs; sources are
    assert keys["base"] == keys["readme"] == keys["patch"] == keys["routes"] != keys["source"]
    first = ws.build(tiny["base"])
    again = {name: ws.build(tiny[name]) for name in ("readme", "patch", "routes")}
    assert not first.cached and all(b.cached and b.directory == first.directory for b in again.values())
    assert finished(ws.cache_dir) == [first.directory]
    assert files(first.directory / "inputs" / "dataplane") == ["meson.build", "src/build_id.h.in", "src/main.c"]
    # the runs' working directory: the commit's build inputs and routes files
    assert files(first.source) == ["meson.build", "routes/example.txt", "src/build_id.h.in", "src/main.c"]
    assert again["readme"].source == first.source and again["routes"].source != first.source
    assert (again["routes"].source / "routes" / "example.txt").read_text() == "10.0.0.0/8 1\n"
    # the build found no repository, not even the one around the cache: every commit of the key says the same
    assert subprocess.run([str(first.binary)], capture_output=True, text=True, check=True).stdout == "unknown\n"
    status = json.loads((first.directory / "status.json").read_text())
    assert status["status"] == "ok" and status["commit"] == tiny["base"] and status["toolchain"] == keys["base"].toolchain
    assert ws.build(tiny["source"]).directory != first.directory
    assert len(finished(ws.cache_dir)) == 2 and not list((ws.cache_dir / "builds").glob(".*"))


TWO_FILES = {
    # debug information, as the dataplane's: it records the build directory, which ccache hashes unless told not to
    "meson.build": "project('two', 'c', default_options: ['buildtype=release', 'debug=true'])\nexecutable('perfci-fwd', 'src/main.c', 'src/scale.c')\n",
    "src/main.c": "int scale(int x);\nint main(int argc, char **argv) { (void)argv; return scale(argc); }\n",
    "src/scale.c": "int scale(int x) { return 3 * x + 1; }\n",
}


def ccache_counts(directory: Path) -> dict[str, int]:
    out = subprocess.run(["ccache", "--print-stats"], capture_output=True, text=True, check=True,
                         env={**os.environ, "CCACHE_DIR": str(directory)}).stdout
    counts = dict(line.split("\t") for line in out.splitlines() if "\t" in line)
    return {"hits": int(counts.get("direct_cache_hit", 0)) + int(counts.get("preprocessed_cache_hit", 0)),
            "misses": int(counts.get("cache_miss", 0))}


def code(binary: Path, scratch: Path) -> dict[str, bytes]:
    """The sections the CPU runs and reads: what a measurement depends on (debug information aside)."""
    sections = {}
    for name in (".text", ".rodata", ".data"):
        out = scratch / f"section{name}"
        subprocess.run(["objcopy", "-O", "binary", f"--only-section={name}", str(binary), str(out)], check=True)
        sections[name] = out.read_bytes()
    return sections


def test_a_new_tree_recompiles_only_the_files_it_changed_into_the_compilers_own_code(tmp_path, monkeypatch):
    monkeypatch.delenv("CCACHE_DIR", raising=False)  # the agent's own: ccache/ in its cache directory
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    base = commit(repo, TWO_FILES, "base")
    changed = commit(repo, {"src/main.c": TWO_FILES["src/main.c"].replace("scale(argc)", "scale(argc + 1)")}, "main")
    ws = Workspace(repo, tmp_path / "agent-cache")
    assert not ws.build(base).cached
    cold = ccache_counts(ws.cache_dir / "ccache")
    assert cold == {"hits": 0, "misses": 2}
    built = ws.build(changed)  # another build directory: scale.c's object is taken, main.c compiled
    assert ccache_counts(ws.cache_dir / "ccache") == {"hits": 1, "misses": 3}
    monkeypatch.setenv("CCACHE_DISABLE", "1")
    alone = Workspace(repo, tmp_path / "no-ccache").build(changed)
    assert code(built.binary, tmp_path) == code(alone.binary, tmp_path)
    assert subprocess.run([str(built.binary)]).returncode == 7  # scale(1 + 1)


def test_the_key_names_the_toolchain(tiny):
    repo, sha = tiny["repo"], tiny["base"]
    here, src = toolchain(), sources(repo, sha)
    assert here["compiler"] and here["meson"] and here["options"] == "--buildtype=release"
    assert build_key(src, here) == build_key(src, dict(here))
    for change in ({"compiler": "cc (Debian 13.1.0-1) 13.1.0"}, {"dpdk": "23.11.0"}, {"env.CFLAGS": "-O0"}):
        assert build_key(src, {**here, **change}).digest != build_key(src, here).digest, change


def test_a_build_reads_only_its_inputs(tiny, tmp_path):
    """A meson.build that reads the README (no build input) fails, and the failure is the key's, recorded."""
    repo = tiny["repo"]
    sha = commit(repo, {"meson.build": TINY_MESON + "configure_file(input: 'README.md', output: 'readme.h', copy: true)\n"},
                 "read the README")
    ws = Workspace(repo, tmp_path / "cache")
    with pytest.raises(BuildFailed, match="configure failed") as failed:
        ws.build(sha)
    assert failed.value.of_commit and "README.md" in failed.value.log_tail
    with pytest.raises(BuildFailed, match="configure failed"):  # recorded: not built again
        ws.build(sha)
    assert json.loads((finished(ws.cache_dir)[0] / "status.json").read_text())["status"] == "build_failed"


def test_concurrent_builders_of_one_key_build_it_once(tiny, tmp_path):
    cache = tmp_path / "cache"
    with ThreadPoolExecutor(2) as pool:  # each its own workspace, as two agents or processes would be
        builds = list(pool.map(lambda name: Workspace(tiny["repo"], cache).build(tiny[name]), ("base", "readme")))
    assert sorted(b.cached for b in builds) == [False, True]
    assert builds[0].directory == builds[1].directory and finished(cache) == [builds[0].directory]


def test_what_a_dead_builder_left_is_cleared_and_a_damaged_build_is_built_again(tiny, tmp_path):
    ws = Workspace(tiny["repo"], tmp_path / "cache")
    key = ws.key(tiny["base"])
    stale = ws.builds / f".{key.digest}.dead1234"
    (stale / "build").mkdir(parents=True)
    first = ws.build(tiny["base"])
    assert not stale.exists() and not first.cached
    first.binary.unlink()  # a build directory someone damaged
    again = ws.build(tiny["readme"])
    assert not again.cached and again.binary.exists()
    assert ws.build(tiny["base"], rebuild=True).cached is False


def test_an_older_perfci_cache_is_never_read(tiny, tmp_path):
    """builds/<sha>/ and worktrees/<sha>/ of an older perfci (here a recorded failure) change nothing."""
    cache, sha = tmp_path / "cache", tiny["base"]
    (cache / "builds" / sha).mkdir(parents=True)
    (cache / "builds" / sha / "status.json").write_text(json.dumps({"status": "build_failed", "reason": "stale"}))
    (cache / "worktrees" / sha / "dataplane").mkdir(parents=True)
    build = Workspace(tiny["repo"], cache).build(sha)
    assert build.binary.exists() and build.directory.name != sha


def test_a_commit_without_a_dataplane_fails_without_building(tiny, tmp_path):
    repo = tiny["repo"]
    empty = git(repo, "commit-tree", git(repo, "hash-object", "-t", "tree", "/dev/null"), "-p", tiny["base"], "-m", "no dataplane")
    ws = Workspace(repo, tmp_path / "cache")
    with pytest.raises(BuildFailed, match="no dataplane/meson.build at this commit") as failed:
        ws.build(empty)
    assert failed.value.of_commit and not (ws.cache_dir / "builds").exists()


def test_no_meson_here_is_this_machines_failure_and_nothing_is_recorded(tiny, tmp_path, monkeypatch):
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "git").symlink_to(shutil.which("git"))
    ws = Workspace(tiny["repo"], tmp_path / "cache")
    monkeypatch.setenv("PATH", str(tools))
    with pytest.raises(BuildFailed, match="meson is not installed") as failed:
        ws.build(tiny["base"])
    assert not failed.value.of_commit and finished(ws.cache_dir) == []


# --- sim counts, kept per binary x machine x tool x options x config --------------------------------

def sim_document() -> ResultDocument:
    """A real sim result (two identical repetitions), as recorded by the calibration tests."""
    return ResultDocument.model_validate_json((FIXTURES / "calibration" / "sim-baseline.json").read_text())


IDENT = {"build": "b" * 64, "machine_id": "m" * 64, "tool": "memhazard-0123", "config": "{}"}


def test_kept_sim_counts_serve_jobs_of_as_many_repetitions_with_their_origin(tmp_path):
    doc = sim_document()
    kept = SimCounts(tmp_path, IDENT)
    assert kept.lookup(1) is None
    kept.record(doc)
    samples, origin = kept.lookup(2)
    assert (origin.commit, origin.started_at, origin.finished_at) == (doc.commit, doc.started_at, doc.finished_at)
    assert [s.raw for s in samples] == [s.raw for s in doc.samples]
    for again, recorded in zip(samples, doc.samples):  # derived again: what the document had (and what the catalogue adds since)
        assert set(recorded.metrics) <= set(again.metrics)
    assert kept.lookup(3) is None  # never more repetitions than were measured
    assert SimCounts(tmp_path, {**IDENT, "tool": "memhazard-4567"}).lookup(1) is None
    assert SimCounts(tmp_path, None).lookup(1) is None


def test_only_identical_measured_ok_sim_repetitions_are_kept(tmp_path):
    doc = sim_document()
    differing = doc.model_copy(deep=True)
    differing.samples[1].raw["sim.fwd_instructions"] += 1
    reused = doc.model_copy(update={"reused_from": {"commit": doc.commit, "started_at": doc.started_at, "finished_at": doc.finished_at}})
    failed = doc.model_copy(update={"status": "run_failed", "reason": "run 1/2 failed"})
    # tsc and pmu always measure: a document of theirs is never kept, whatever its samples
    tsc, pmu = (doc.model_copy(update={"backend": backend}) for backend in (Backend.TSC, Backend.PMU))
    for label, candidate in (("differing", differing), ("reused", reused), ("failed", failed), ("tsc", tsc), ("pmu", pmu)):
        kept = SimCounts(tmp_path / label, IDENT)
        kept.record(candidate)
        assert kept.lookup(1) is None, label
    kept = SimCounts(tmp_path / "one", IDENT)
    kept.record(doc)
    kept.record(doc.model_copy(update={"samples": doc.samples[:1], "commit": "f" * 40}))  # fewer repetitions: kept stays
    assert kept.lookup(2)[1].commit == doc.commit


# --- the real dataplane ----------------------------------------------------------------------------

def one_file_commit(repo: Path, parent: str, path: str, tmp_path: Path) -> str:
    """A commit on ``parent`` that adds a line to the one file ``path``, made with git's plumbing in
    a private index (the shared scratch repository's checkout stays as it is)."""
    env = {**os.environ, "GIT_INDEX_FILE": str(tmp_path / f"index-{path.replace('/', '-')}")}
    git(repo, "read-tree", parent, env=env)
    text = git(repo, "show", f"{parent}:{path}") + "\n# one more line\n"
    blob = subprocess.run(["git", "-C", str(repo), "hash-object", "-w", "--stdin"], input=text, capture_output=True, text=True,
                          check=True).stdout.strip()
    git(repo, "update-index", "--cacheinfo", f"100644,{blob},{path}", env=env)
    tree = git(repo, "write-tree", env=env)
    return git(repo, "commit-tree", tree, "-p", parent, "-m", f"{path}: one more line", env=env)


SIM_KEYS = ("sim.fwd_instructions", "sim.sf_", "sim.split_", "sim.alias_", "sim.site.", "sim.loads", "sim.stores",
            "sim.d1_misses", "sim.ll_misses")


@pytest.mark.dataplane
def test_a_docs_only_commit_is_one_build_with_bit_identical_sim_counts_then_reused(scratch_repo, tmp_path):
    r = scratch_repo
    repo, base = r["repo"], r["base"]
    docs = one_file_commit(repo, base, "dataplane/README.md", tmp_path)
    assert git(repo, "diff", "--name-only", base, docs) == "dataplane/README.md"
    ws = Workspace(repo, r["cache"])
    builds = [ws.build(sha) for sha in (base, docs)]
    assert builds[1].cached and builds[0].directory == builds[1].directory

    # both simulated (nothing kept is used), each at its own commit
    measured = {sha: measure(repo, sha, backend="sim", reps=1, cache_dir=r["cache"], reuse=False) for sha in (docs, base)}
    for sha, doc in measured.items():
        assert doc.status == "ok" and doc.reused_from is None and doc.commit == sha, doc.reason
    raw = [measured[sha].samples[0].raw for sha in (base, docs)]
    assert raw[0] == raw[1] and any(k.startswith(SIM_KEYS[1:5]) for k in raw[0])  # bit for bit, hazards and sites too
    assert measured[base].samples[0].metrics == measured[docs].samples[0].metrics
    assert measured[base].build_id == measured[docs].build_id == builds[0].key.build_id

    again = measure(repo, docs, backend="sim", reps=1, cache_dir=r["cache"])
    assert again.reused_from is not None and again.reused_from.commit == base and again.commit == docs
    assert again.samples[0].raw == raw[0] and again.samples[0].metrics == measured[docs].samples[0].metrics
    assert again.started_at > measured[base].finished_at  # this job's own times; the origin's are in reused_from


@pytest.mark.dataplane
def test_the_sim_identity_names_every_input_of_the_counts(scratch_repo, tmp_path):
    r = scratch_repo
    ws = Workspace(r["repo"], r["cache"])
    build = ws.build(r["base"])
    sim = SimBackend(tool_cache=ws.cache_dir / "tools")
    config = sim.config_for(CONFIGS["self-64B"])
    base = identity(sim, build, config, "m" * 64)
    assert base == identity(sim, build, config, "m" * 64)
    variants = [
        identity(sim, build, config, "n" * 64),
        identity(sim, build, config.model_copy(update={"pkt_size": 512}), "m" * 64),
        identity(SimBackend(tool_cache=sim.tool_cache, family="amd-zen4"), build, config, "m" * 64),
        identity(SimBackend(tool_cache=sim.tool_cache, commit_rule="rob"), build, config, "m" * 64),
        identity(SimBackend(tool_cache=sim.tool_cache, lcores=2), build, config, "m" * 64),
        identity(SimBackend(tool_cache=sim.tool_cache, cache_sim=False), build, config, "m" * 64),
        identity(sim, build, config.model_copy(update={"routes": "routes/example.txt"}), "m" * 64),
    ]
    assert all(v is not None and v != base for v in variants)
    assert base["tool"].startswith("memhazard-") and base["build"] == build.key.digest
    # a commit that changes only a routes file: the same binary, and the same identity unless the config reads that file
    routed = ws.build(one_file_commit(r["repo"], r["base"], "dataplane/routes/example.txt", tmp_path))
    assert routed.cached and routed.directory == build.directory
    with_routes = config.model_copy(update={"routes": "routes/example.txt"})
    assert identity(sim, routed, config, "m" * 64) == base
    assert identity(sim, routed, with_routes, "m" * 64) != identity(sim, build, with_routes, "m" * 64)
    # a routes file that is not one of the commit's files the runs read: never reused
    assert identity(sim, build, config.model_copy(update={"routes": "../README.md"}), "m" * 64) is None
    assert identity(sim, build, config.model_copy(update={"routes": "README.md"}), "m" * 64) is None


@pytest.mark.dataplane
def test_tsc_always_measures(scratch_repo):
    """The same binary, config and machine measured twice on tsc: two measurements, nothing kept."""
    r = scratch_repo
    kept = Path(r["cache"]) / "sim-counts"
    before = files(kept) if kept.is_dir() else []
    first, second = (measure(r["repo"], r["base"], backend="tsc", reps=1, config="self-64B-short", cache_dir=r["cache"])
                     for _ in range(2))
    for doc in (first, second):
        assert doc.status == "ok" and doc.backend == Backend.TSC and doc.reused_from is None, doc.reason
    assert second.started_at > first.finished_at and first.build_id == second.build_id
    assert (files(kept) if kept.is_dir() else []) == before
