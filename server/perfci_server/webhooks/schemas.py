"""The webhook routes' answer. What a delivery means is read by each forge's record
(:mod:`..forge.registry`) into the forge-neutral events of :mod:`..forge.events`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class WebhookAccepted(BaseModel):
    status: Literal["scheduled", "ignored", "duplicate", "pong"]
    detail: str = ""
    commits: int = 0  # a push: the commits its payload listed
    # A recorded push: false until the server's mirror of the repository is fetched (a task after the
    # answer; only the commits the payload listed are recorded until then). None: not a push.
    complete: bool | None = None
