"""A broker that is down, as the web process meets it: a loopback port nothing listens on."""

from __future__ import annotations

import socket


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
