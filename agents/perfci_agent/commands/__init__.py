"""The agent's own `perfci` commands, the ones that measure on this host. Each module exposes
``register(app)``; heavy imports stay inside the commands so that ``perfci --help`` loads little.

    measure.py   perfci measure        agent.py   perfci agent run|check        demo.py   perfci demo

The commands that ask the server (compare, alerts, check, plot, bisect) are the client's:
:mod:`perfci_cli.commands`.
"""
