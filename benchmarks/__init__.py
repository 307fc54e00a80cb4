"""Rerunnable speed and quality figures (docs/benchmarks.md). Each script runs from the checkout
(``.venv/bin/python benchmarks/<name>/run.py``), checks the premise of what it measures (exits
non-zero, saying why, when that did not happen: :mod:`benchmarks.premise`) and has a ``--smoke``
mode that runs in seconds (tests/benchmarks/test_smoke.py runs them all)."""
