from __future__ import annotations

from pathlib import Path

import pytest

from .fwd import DATAPLANE, build


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/dataplane/" in str(item.fspath):
            item.add_marker(pytest.mark.dataplane)


@pytest.fixture(scope="session")
def fwd_bin(tmp_path_factory) -> Path:
    """The dataplane built from this tree (reuses dataplane/build when `make` made it)."""
    built = DATAPLANE / "build" / "build.ninja"
    builddir = built.parent if built.exists() else tmp_path_factory.mktemp("fwd-build")
    return build(DATAPLANE, builddir)
