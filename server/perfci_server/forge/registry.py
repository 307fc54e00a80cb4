"""The forges perfci speaks to: one record each (kind.py says what a record holds). Adding a forge
is its module and one line here (docs/contributing.md)."""

from __future__ import annotations

from enum import StrEnum

from .gitea import Gitea
from .github import GitHub
from .gitlab import GitLab
from .kind import ForgeKind

KINDS: dict[str, ForgeKind] = {kind.name: kind for kind in (
    GitHub(),
    GitLab(),
    Gitea(),
)}

# The names as an enum, for the API's schemas (a repository's `forge`).
Forge = StrEnum("Forge", {name.upper(): name for name in KINDS})  # type: ignore[misc]


def kind_of(name: str) -> ForgeKind:
    """The record of a stored forge name (repository.forge, validated when it was registered)."""
    return KINDS[name]
