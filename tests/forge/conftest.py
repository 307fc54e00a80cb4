"""Fixtures of the forge tests: a real Gitea (``gitea``, from :mod:`tests.support.gitea`) and a
loopback HTTP server recording the webhook deliveries it sends.

One Gitea serves the whole session (starting one takes seconds); each test makes its own repository.
Without PERFCI_GITEA_BIN the tests fail, never skip: CI must build Gitea (`make test` does).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.forge.webhook_listener import WebhookListener


@pytest.fixture
def webhook_listener() -> Iterator[WebhookListener]:
    listener = WebhookListener()
    yield listener
    listener.close()
