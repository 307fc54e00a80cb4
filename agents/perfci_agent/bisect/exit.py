"""The exit status of a bisect, from its result document (a local report's ``to_dict`` or the
server's bisect): what CI gates on. Documented in ``perfci bisect --help`` and docs/usage.md."""

from __future__ import annotations

from typing import Any

EXIT_FOUND = 0  # the culprit of the hunted kind, confirmed; no move the other way seen
EXIT_NOT_FOUND = 1  # no change of the hunted kind, or the search was inconclusive
EXIT_USAGE = 2  # bad input, server errors
EXIT_FOUND_OPPOSING_ISOLATED = 3  # the culprit, and a move the other way isolated too
EXIT_FOUND_OPPOSING_OPEN = 4  # the culprit, and a move the other way seen but not isolated


def exit_status(result: dict[str, Any]) -> int:
    if result.get("status") != "culprit":
        return EXIT_NOT_FOUND
    moves = [m for m in result.get("opposing") or [] if not m.get("dismissed")]
    if not moves:
        return EXIT_FOUND
    return EXIT_FOUND_OPPOSING_ISOLATED if all(m.get("isolated") for m in moves) else EXIT_FOUND_OPPOSING_OPEN
