"""The user's client of the results service, for the `perfci` commands that ask the server
(compare, alerts, check, plot, bisect): the server and token from the command line, else
``PERFCI_SERVER_URL`` / ``PERFCI_TOKEN``, else the local default. The HTTP plumbing (requests,
:class:`ApiError`, :class:`ServerUnreachable`) is the agent's :mod:`perfci_agent.server_api`,
which the agent daemon's client uses too: one transport, and the agent never imports this package."""

from __future__ import annotations

import os
from typing import Any

from perfci_agent.server_api import DEFAULT_URL, ApiClient, ApiError, ServerUnreachable

__all__ = ["ApiError", "ServerClient", "ServerUnreachable"]


class ServerClient(ApiClient):
    @classmethod
    def from_env(cls, url: str | None = None, token: str | None = None, **kwargs: Any) -> ServerClient:
        """Explicit arguments first, then PERFCI_SERVER_URL / PERFCI_TOKEN, then the local default."""
        return cls(url or os.environ.get("PERFCI_SERVER_URL") or DEFAULT_URL,
                   token or os.environ.get("PERFCI_TOKEN") or None, **kwargs)
