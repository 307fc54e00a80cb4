"""A broker that is down, as the web process meets it: a Redis URL on a loopback port nothing
listens on, and the real Celery publish (which retries briefly, then raises)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from perfci_server import dispatch
from perfci_server.settings import get_settings


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def broker_down(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every task the code sends goes to a dead broker; yields the names whose send failed."""
    url = f"redis://127.0.0.1:{closed_port()}/0"
    producer = Celery("perfci-broker-down", broker=url)
    producer.conf.broker_connection_timeout = 1
    failed: list[str] = []

    def send(name: str, args: tuple[Any, ...]) -> None:
        try:
            producer.send_task(name, args=args, queue="perfci", retry=False)
        except Exception:
            failed.append(name)
            raise

    monkeypatch.setenv("PERFCI_BROKER_URL", url)  # the coalescing marks meet the same dead Redis
    get_settings.cache_clear()
    monkeypatch.setattr(dispatch, "sender", send)
    monkeypatch.setattr(dispatch, "_redis_clients", {})
    yield failed
    producer.close()
