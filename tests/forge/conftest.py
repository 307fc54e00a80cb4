"""Fixtures of the forge tests: a real Gitea (the build .ci/gitea makes, PERFCI_GITEA_BIN) and a
loopback HTTP server recording the webhook deliveries it sends.

One Gitea serves the whole session (starting one takes seconds); each test makes its own repository.
Without PERFCI_GITEA_BIN the tests fail, never skip: CI must build Gitea (`make test` does).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gitea import Gitea, GiteaBuild, GiteaError
from webhook_listener import WebhookListener


@pytest.fixture(scope="session")
def gitea(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gitea]:
    try:
        server = Gitea.start(GiteaBuild.from_env(), tmp_path_factory.mktemp("gitea"))
    except GiteaError as exc:
        raise pytest.fail.Exception(str(exc), pytrace=False) from None  # pytest.fail, without the chained traceback
    yield server
    server.stop()


@pytest.fixture
def webhook_listener() -> Iterator[WebhookListener]:
    listener = WebhookListener()
    yield listener
    listener.close()
