"""The tests are one package. Fixtures every directory may use live in :mod:`tests.support`,
registered here as plugins; a directory's own fixtures live in its conftest. Support code is
imported by package path (``from tests.server.server_support import ...``)."""

pytest_plugins = [
    "tests.support.services",
    "tests.support.database",
    "tests.support.server",
    "tests.support.celery_worker",
    "tests.support.gitea",
    "tests.support.groups",
    "tests.support.builds",
]
