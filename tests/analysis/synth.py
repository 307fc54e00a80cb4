"""Synthetic series with known steps for the analysis tests (seeded, deterministic)."""

from __future__ import annotations

import numpy as np


def levels(n: int, steps: dict[int, float], base: float = 100.0) -> np.ndarray:
    """Per-commit true level: ``base`` multiplied by (1 + r) from each step index on."""
    lv = np.full(n, base)
    for k, r in steps.items():
        lv[k:] *= 1.0 + r
    return lv


def noisy(level: np.ndarray, rng: np.random.Generator, kind: str = "normal", cv: float = 0.01,
          reps: int | np.ndarray = 5) -> list[tuple[str, np.ndarray]]:
    """Points with repetitions around ``level``: normal, heavy (Student t, 2 dof), bimodal
    (each run in a +3 cv slow mode with probability 0.2), outliers (5 % of runs +20 %)."""
    counts = np.broadcast_to(np.asarray(reps), level.shape)
    out = []
    for i, (lv, r) in enumerate(zip(level, counts)):
        r = int(r)
        if kind == "normal":
            e = cv * rng.standard_normal(r)
        elif kind == "heavy":
            e = cv * rng.standard_t(2, r) / np.sqrt(2.0)
        elif kind == "bimodal":
            e = cv * rng.standard_normal(r) + 3 * cv * (rng.random(r) < 0.2)
        elif kind == "outliers":
            e = cv * rng.standard_normal(r) + 0.20 * (rng.random(r) < 0.05)
        else:
            raise ValueError(kind)
        out.append((f"c{i:04d}", lv * (1.0 + e)))
    return out


def drifting_host(n_runs: int, rng: np.random.Generator, cv: float = 0.02, walk: float = 0.01,
                  burst_rate: float = 0.1, burst: tuple[float, float] = (0.3, 1.5)) -> np.ndarray:
    """Multiplicative host slow-down per run, in run order: a random walk (the host's load
    drifting, ``walk`` per run), bursts (a run ``burst`` slower with probability ``burst_rate``:
    another job landed on the CPU) and the run's own noise ``cv``."""
    level = np.cumsum(walk * rng.standard_normal(n_runs))
    bursts = (rng.random(n_runs) < burst_rate) * rng.uniform(*burst, n_runs)
    return np.exp(level + cv * rng.standard_normal(n_runs)) * (1.0 + bursts)


def search_case(rng: np.random.Generator, most: int) -> tuple[np.ndarray, np.ndarray, int, float]:
    """A random input of the change-point search: up to ``most`` standardised points with one
    step somewhere (or none), their weights, a minimum group length and a penalty."""
    n = int(rng.integers(1, most))
    y = rng.normal(0, 1, n) + np.where(np.arange(n) >= rng.integers(0, n + 1), rng.normal(0, 4), 0.0)
    return y, rng.uniform(0.01, 2.0, n), int(rng.integers(1, 5)), float(rng.uniform(0.5, 15.0))
