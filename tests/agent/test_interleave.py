"""Interleaved A/B measurement against the real dataplane (tsc): order and structure only, never
a verdict -- tsc timings on a shared host decide nothing in a test."""

import pytest

from perfci_agent.interleave import SIDES, interleave, pair_order
from perfci_agent.measure import measure

pytestmark = pytest.mark.dataplane
CONFIG = "self-64B-short"


def test_the_order_is_a_function_of_the_seed_and_extends_as_a_prefix():
    assert pair_order(7, 12) == pair_order(7, 12)
    assert pair_order(7, 20)[:12] == pair_order(7, 12)
    assert set(pair_order(7, 40)) == set(SIDES)  # both orders happen
    assert [pair_order(s, 12) for s in range(5)] != [pair_order(0, 12)] * 5


def test_both_builds_come_before_the_first_run_and_runs_alternate_in_the_seeded_order(scratch_repo):
    r = scratch_repo
    events: list[tuple[str, dict]] = []
    done = interleave(r["repo"], r["base"], r["regressed"], 3, seed=1234, backend="tsc", config=CONFIG,
                      cache_dir=r["cache"], progress=lambda e, **kw: events.append((e, kw)))
    assert done.ok, (done.base.reason, done.head.reason)
    names = [e for e, _ in events]
    first_run = names.index("run")
    assert [kw["side"] for e, kw in events[:first_run] if e == "built"] == ["base", "head"]
    assert "measure_built" not in names[:first_run] and "measure_run" not in names[:first_run]
    # pair i: both sides, the seeded side first
    assert done.seed == 1234 and done.first == pair_order(1234, 3)
    assert done.run_order == [(i, side) for i, first in enumerate(done.first)
                              for side in (first, SIDES[1 - SIDES.index(first)])]
    assert [kw["side"] for e, kw in events if e == "run"] == [side for _, side in done.run_order]
    for doc, sha in ((done.base, r["base"]), (done.head, r["regressed"])):
        assert doc.commit == sha and doc.status == "ok" and doc.backend.value == "tsc"
        assert [s.rep for s in doc.samples] == [0, 1, 2]
    base, head = done.values("cpp")
    assert len(base) == len(head) == 3 and all(v > 0 for v in base + head)
    assert done.to_dict() == {"seed": 1234, "pairs": 3, "first": done.first,
                              "run_order": [[p, s] for p, s in done.run_order]}


def test_more_pairs_continue_the_order_of_the_seed(scratch_repo):
    r = scratch_repo
    more = interleave(r["repo"], r["base"], r["regressed"], 2, seed=1234, start_pair=3, backend="tsc",
                      config=CONFIG, cache_dir=r["cache"])
    assert more.first == pair_order(1234, 5)[3:]
    assert [s.rep for s in more.base.samples] == [3, 4]


def test_a_commit_that_does_not_build_means_no_run_at_all(scratch_repo):
    r = scratch_repo
    runs = []
    done = interleave(r["repo"], r["base"], r["broken"], 3, seed=1, backend="tsc", config=CONFIG,
                      cache_dir=r["cache"], progress=lambda e, **kw: runs.append(e) if e == "run" else None)
    assert not done.ok and not runs and done.pairs == 0
    assert done.head.status == "build_failed" and "compile failed" in done.head.reason
    assert done.base.status == "run_failed" and "head commit does not build" in done.base.reason


def test_on_sim_a_session_takes_the_counts_this_machine_already_simulated(scratch_repo, tmp_path):
    """sim is exact: a side measured before costs no simulation; a side measured for the first time
    simulates its first pair once and says it measured (not reused) — its later pairs repeat those counts."""
    r = scratch_repo
    cache = tmp_path / "cache"  # nothing kept yet, whatever ran before
    before = measure(r["repo"], r["base"], backend="sim", reps=1, config=CONFIG, cache_dir=cache)
    assert before.status == "ok" and before.reused_from is None, before.reason
    events: list[tuple[str, dict]] = []
    done = interleave(r["repo"], r["base"], r["regressed"], 2, seed=5, backend="sim", config=CONFIG, cache_dir=cache,
                      progress=lambda e, **kw: events.append((e, kw)))
    assert done.ok, (done.base.reason, done.head.reason)
    reused = [(kw["side"], kw["pair"], kw["commit"]) for e, kw in events if e == "measure_reused"]
    assert sorted(reused) == [("base", 0, r["base"]), ("base", 1, r["base"]), ("head", 1, r["regressed"])]
    assert done.base.reused_from is not None and done.base.reused_from.commit == r["base"]
    assert done.base.reused_from.started_at == before.started_at
    assert done.head.reused_from is None  # its first pair was simulated in this session
    base, head = done.values("ipp")
    (measured,) = [m.value for m in before.samples[0].metrics if m.metric == "ipp" and m.backend == before.backend]
    assert base == [measured, measured]
    assert head[0] == head[1] and head[0] > base[0] * 1.005  # the regression, the same counts in both pairs
    fresh = interleave(r["repo"], r["base"], r["regressed"], 1, seed=5, backend="sim", config=CONFIG, cache_dir=cache, reuse=False,
                       progress=lambda e, **kw: events.append((e, kw)))
    assert fresh.base.reused_from is None and fresh.values("ipp") == ([base[0]], [head[0]])
