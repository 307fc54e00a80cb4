"""perfci agent: build, run and measure the dataplane at a commit, on the host that runs it.

The measurement core (workspace, runner, backends, perf/valgrind parsing, memhazard's driver), the
daemon that talks to the server over HTTP (:mod:`.daemon`), local bisection (:mod:`.bisect`), the
demo (:mod:`.demo`), and the agent's own `perfci` commands in a folder of their own
(:mod:`.commands`: measure, agent, demo). The commands that ask the server (compare, alerts,
check, plot, bisect) are the client's, in :mod:`perfci_cli`, which an agent host does not need.
The metric catalogue, the result document and the analysis come from :mod:`perfci_core`;
nothing here imports the server's package or the client's.
"""
