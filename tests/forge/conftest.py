"""Fixtures of the forge tests: a real Gitea (the build .ci/gitea makes, PERFCI_GITEA_BIN) and a
loopback HTTP server recording the webhook deliveries it sends.

One Gitea serves the whole session (starting one takes seconds); each test makes its own repository.
Without PERFCI_GITEA_BIN the tests fail, never skip: CI must build Gitea (`make test` does).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gitea_fixture import gitea  # noqa: F401 - the session's Gitea
from webhook_listener import WebhookListener


@pytest.fixture
def webhook_listener() -> Iterator[WebhookListener]:
    listener = WebhookListener()
    yield listener
    listener.close()
