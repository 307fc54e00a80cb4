"""Text from a forge, a commit, an agent or a machine's name inside Markdown (a pull request's
comment, a verdict page): its own markup characters are shown, never applied — a name cannot
become a link, an image, HTML, emphasis, code, a table cell, a heading or a list. Characters that
mean something only at the start of a line (``#``, ``-``, ``+``, ``1.``) are escaped there only, so
the raw text stays readable."""

from __future__ import annotations

import re

_MARKUP = frozenset("\\`*_[]<>|~&")
_BLOCK_START = re.compile(r"^[#>=+-]")
_ORDERED = re.compile(r"^(\d+)([.)])")


def escape(text: str) -> str:
    """``text`` on one line, safe anywhere in a line of Markdown."""
    flat = "".join("\\" + ch if ch in _MARKUP else ch for ch in " ".join(text.split()))
    if _BLOCK_START.match(flat):
        return "\\" + flat
    return _ORDERED.sub(r"\1\\\2", flat, count=1)
