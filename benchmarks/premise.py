"""A benchmark's premise: what must have happened for its figures to measure anything. A figure
taken when it did not (no alert to time, no packet forwarded, no row returned) is not printed as a
result: the run exits non-zero and says why."""

from __future__ import annotations

from typing import NoReturn


class PremiseFailed(SystemExit):
    """Exit status 1, the reason on stderr (as SystemExit prints a string)."""


def fail(reason: str) -> NoReturn:
    raise PremiseFailed(f"premise failed: {reason}")


def require(holds: bool, reason: str) -> None:
    """Fail with ``reason`` unless ``holds``."""
    if not holds:
        fail(reason)
