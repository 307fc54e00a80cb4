"""The detection and comparison benchmarks' ``--smoke`` modes run and their premises hold (each
exits non-zero when what it measures did not happen). The figures are not asserted.
``benchmarks/compare/run.py --smoke`` takes minutes of CPU and is left to its own runs."""

from __future__ import annotations

import pytest

from tests.benchmarks.test_smoke import smoke

pytestmark = pytest.mark.timeout(900)


def test_detection_smoke():
    assert "pooled" in smoke("detection/run.py", "--adaptive")


def test_null_levels_smoke():
    assert "confirmation, job drift 2%: confirmed" in smoke("detection/null_levels.py")


def test_creeps_smoke():
    assert "one creep" in smoke("detection/creeps.py")


def test_session_pairs_smoke():
    assert "trials a cell" in smoke("compare/session_pairs.py")
    assert "the share called DIFFERENT" in smoke("compare/session_pairs.py", "--recorded")


def test_pull_requests_smoke():
    assert "step 0: an unchanged head" in smoke("compare/pull_requests.py")
