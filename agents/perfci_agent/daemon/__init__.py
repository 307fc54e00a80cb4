"""The agent daemon (`perfci agent run|check`): enrolls once, then claims jobs, measures them with
`perfci measure`'s code, spools and uploads the results, and keeps its leases alive.

    config.py    TOML + PERFCI_AGENT_* environment          identity.py  fingerprint, token, enrollment
    host.py      usable backends, tuned-state gate          mirror.py    bare mirror cache per clone URL
    spool.py     results on disk until acknowledged         backoff.py   exponential backoff with jitter
    lease.py     background lease renewal                   agent.py     the loop
    check.py     the self-check

Its commands are in :mod:`perfci_agent.commands.agent`.
"""
