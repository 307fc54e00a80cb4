"""The client's `perfci` commands, the ones that ask the server (over :mod:`perfci_cli.client`).
Each module exposes ``register(app)``; heavy imports stay inside the commands so that
``perfci --help`` loads little.

    compare.py   perfci compare      (--measure: measured here by the agent's ab_compare)
    alerts.py    perfci alerts ...   (and the server options and error handling the others share)
    check.py     perfci check
    plot.py      perfci plot         (matplotlib, loaded when a plot is drawn)
    bisect.py    perfci bisect, alerts bisect (--local: measured here by the agent's bisect)
"""
