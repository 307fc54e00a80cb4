"""The `perfci` command line: one Typer app (:mod:`.app`) that registers the client's commands
(:mod:`.commands`: compare, alerts, check, plot, bisect, over :mod:`.client`), the agent's
(:mod:`perfci_agent.commands`: measure, agent, demo) and the server's (:mod:`perfci_server.cli`)."""
