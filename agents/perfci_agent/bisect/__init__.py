"""``perfci bisect``: name the commit that moved a metric, on this machine or through the server.

- :mod:`.commits` — the first-parent commits between good and bad (git)
- :mod:`.cache`   — results measured locally, kept per machine x config x backend x commit
- :mod:`.local`   — the local runner: :func:`perfci_agent.measure.measure` per commit, driven by
  the pure search in :mod:`perfci_core.analysis.bisect`
- :mod:`.profile` — which functions' costs moved between parent and culprit (callgrind; perf record)
- :mod:`.exit`    — the exit status of a result (what CI gates on)

The ``perfci bisect`` command and ``perfci alerts bisect``'s implementation are in
:mod:`perfci_cli.commands.bisect` (the client, which uses this package for a local bisect).
"""
