"""perfci core: what the agent and the server share, pure Python over numbers.

- :mod:`.metrics`  — the metric catalogue: raw counter keys, the lean-model formulas, units, directions
- :mod:`.result`   — the result document (the agent ↔ server contract, schema ``perfci.result/1``)
  and the benchmark configuration
- :mod:`.analysis` — noise, two-sample verdicts, change points, detection, explanation, the
  bisection search

Depends on numpy, scipy and pydantic only; imports nothing of the agent, the server, FastAPI,
SQLAlchemy, Celery or an HTTP client.
"""
