"""Bare mirror cache against real git repositories; measure's builds come from the mirror."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from perfci_agent.daemon.mirror import FetchFailed, MirrorCache
from perfci_agent.workspace import export, repo_root, sources


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def commit(repo: Path, name: str) -> str:
    (repo / name).write_text(name)
    git(repo, "add", name)
    git(repo, "-c", "user.email=t@perfci.invalid", "-c", "user.name=t", "commit", "-qm", name)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def upstream(tmp_path) -> Path:
    repo = tmp_path / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    return repo


def test_clone_once_then_fetch_only_for_unknown_commits(upstream, tmp_path):
    first = commit(upstream, "a")
    cache = MirrorCache(tmp_path / "mirrors")
    mirror, action = cache.fetch(str(upstream), first)
    assert action == "cloned" and git(mirror, "rev-parse", "--is-bare-repository") == "true"
    assert cache.fetch(str(upstream), first) == (mirror, "cached")
    second = commit(upstream, "b")
    assert cache.fetch(str(upstream), second) == (mirror, "fetched")
    assert cache.has_commit(mirror, second)


def test_a_commit_on_no_branch_is_fetched_by_id(upstream, tmp_path):
    base = commit(upstream, "a")
    git(upstream, "checkout", "-q", "-b", "topic")
    dangling = commit(upstream, "b")
    git(upstream, "checkout", "-q", "main")
    git(upstream, "branch", "-D", "topic")  # only reachable by id now (like a force-pushed commit)
    git(upstream, "config", "uploadpack.allowAnySHA1InWant", "true")
    cache = MirrorCache(tmp_path / "mirrors")
    cache.fetch(f"file://{upstream}", base)
    mirror, _ = cache.fetch(f"file://{upstream}", dangling)
    assert cache.has_commit(mirror, dangling)


def test_fetch_failures_say_what_failed(upstream, tmp_path):
    commit(upstream, "a")
    cache = MirrorCache(tmp_path / "mirrors")
    with pytest.raises(FetchFailed, match="cloning .*nope failed"):
        cache.fetch(str(tmp_path / "nope"), "0" * 40)
    with pytest.raises(FetchFailed, match=f"commit {'1' * 40} is not in"):
        cache.fetch(str(upstream), "1" * 40)
    assert not list((tmp_path / "mirrors").glob("*.partial"))


def test_mirrors_of_different_urls_do_not_collide(tmp_path):
    cache = MirrorCache(tmp_path)
    a, b = cache.path_for("https://git.example.com/a/dataplane.git"), cache.path_for("https://git.example.com/b/dataplane.git")
    assert a != b and a.name.startswith("dataplane-") and a.suffix == ".git"


def test_measure_takes_the_bare_mirror_as_its_repository(upstream, tmp_path):
    (upstream / "dataplane").mkdir()
    sha = commit(upstream, "dataplane/meson.build")
    mirror, _ = MirrorCache(tmp_path / "mirrors").fetch(str(upstream), sha)
    root = repo_root(mirror)
    assert root == mirror.resolve()
    src = sources(root, sha)
    assert [entry.split("\t")[1] for entry in src.entries] == ["meson.build"]
    export(root, sha, src.entries, tmp_path / "tree")
    assert (tmp_path / "tree" / "meson.build").read_text() == "dataplane/meson.build"
