"""The `perfci` command line: one Typer app that registers the agent side's commands
(:mod:`perfci_agent.commands`) and the server's (:mod:`perfci_server.cli`). It owns no command."""
