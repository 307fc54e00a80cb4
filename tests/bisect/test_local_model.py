"""`perfci bisect --local --sim-family`: every commit measured with the model asked for, only that
model's cached results reused, and the report names the model.

The repository: base, a neutral edit, then a 32-bit reload across the 8-byte boundary inside the
16-byte MAC store (Intel cores cannot forward it, Zen 4 forwards any contained load: the forwarding
rules of ``hazards/tool/mh_main.c``), then another neutral edit.
"""

from __future__ import annotations

import shutil

import pytest

from perfci_agent.bisect.local import LocalBisect

from tests.bisect.bisect_repo import DATAPLANE, _build_dirs, git

pytestmark = pytest.mark.dataplane
CONFIG = "self-64B-short"
STRADDLE_INDEX = 2
MAC_STORE = "\t_mm_storeu_si128((__m128i *)eth, hdr);\n}"
STRADDLING_RELOAD = ("\t_mm_storeu_si128((__m128i *)eth, hdr);\n"
                     "\t(void)*(volatile const uint32_t *)((const uint8_t *)eth + 6); /* bytes 6-9 of the 16 just stored */\n}")


@pytest.fixture(scope="module")
def model_repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("model") / "repo"
    repo.mkdir()
    shutil.copytree(DATAPLANE, repo / "dataplane", ignore=_build_dirs)
    git(repo, "init", "-q", "-b", "main")
    shas = []
    for i in range(4):
        if i == STRADDLE_INDEX:
            fwd = repo / "dataplane" / "src" / "fwd.c"
            assert fwd.read_text().count(MAC_STORE) == 1
            fwd.write_text(fwd.read_text().replace(MAC_STORE, STRADDLING_RELOAD))
        else:
            readme = repo / "dataplane" / "README.md"
            readme.write_text(readme.read_text() + f"\nNote {i}.\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"change {i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return {"repo": repo, "shas": shas, "cache": tmp_path_factory.mktemp("model-cache")}


def test_the_bisect_measures_with_the_model_asked_for_and_reuses_only_its_results(model_repo):
    repo, shas, cache = model_repo["repo"], model_repo["shas"], model_repo["cache"]
    zen = LocalBisect(repo, shas[0], shas[-1], "sf_blocks_pp", config=CONFIG, backend="sim", cache_dir=cache,
                      sim_family="amd-zen4").run().to_dict()
    assert zen["status"] == "no_change" and zen["sim_family"] == "amd-zen4", zen["message"]
    spr = LocalBisect(repo, shas[0], shas[-1], "sf_blocks_pp", config=CONFIG, backend="sim", cache_dir=cache,
                      sim_family="intel-spr").run()
    doc = spr.to_dict()
    assert doc["status"] == "culprit" and doc["culprit"]["sha"] == shas[STRADDLE_INDEX], doc["message"]
    assert doc["sim_family"] == "intel-spr"
    assert not [c for c in doc["commits"] if c["status"] == "cached"]  # the endpoints' amd-zen4 results stayed out
    hazards = next(p for p in spr.profiles if p.tool == "memhazard")
    assert hazards.available and "intel-spr" in hazards.reason, hazards.reason
    top = hazards.functions[0]
    assert top.function.startswith("store-forward blocks: mac_rewrite@fwd.c:") and top.delta == pytest.approx(1.0, abs=0.01)
