"""The agent side's `perfci` commands. Each module exposes ``register(app)``; heavy imports stay
inside the commands so that ``perfci --help`` loads little.

    measure.py   perfci measure                      agent.py    perfci agent run|check
    compare.py   perfci compare (HTTP client)        bisect.py   perfci bisect, alerts bisect
    alerts.py    perfci alerts ... (HTTP client)     demo.py     perfci demo
    check.py     perfci check (HTTP client)          plot.py     perfci plot (HTTP client)
"""
