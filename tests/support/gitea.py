"""``gitea``: one real Gitea (the build .ci/gitea makes, PERFCI_GITEA_BIN) per worker, on a free
loopback port in a scratch directory, for the forge tests and the end-to-end tests alike. Without
the build the tests fail, never skip: CI must build Gitea (`make test` does)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.forge.gitea import Gitea, GiteaBuild, GiteaError


@pytest.fixture(scope="session")
def gitea(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gitea]:
    try:
        server = Gitea.start(GiteaBuild.from_env(), tmp_path_factory.mktemp("gitea"))
    except GiteaError as exc:
        raise pytest.fail.Exception(str(exc), pytrace=False) from None  # pytest.fail, without the chained traceback
    yield server
    server.stop()
