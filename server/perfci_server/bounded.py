"""Values a request may carry into SQL: integers bounded to the column they meet, text the database
can store.

A number past the column's range (2^63 and up for BIGINT ids) or a NUL in a string is not a
missing row but a driver error; declared here once, every route answers it 422 with the error
envelope instead.
"""

from __future__ import annotations

import re
from typing import Annotated

from annotated_types import Interval

from perfci_core.result import BIGINT_MAX, INTEGER_MAX

# BIGINT_MAX: ids (BigId), OFFSET; INTEGER_MAX: attempts, branch positions.
DbId = Annotated[int, Interval(ge=-BIGINT_MAX - 1, le=BIGINT_MAX)]
DbInt = Annotated[int, Interval(ge=-INTEGER_MAX - 1, le=INTEGER_MAX)]
DbOffset = Annotated[int, Interval(ge=0, le=BIGINT_MAX)]

# Text: PostgreSQL stores neither NUL (text, and "\u0000" in jsonb) nor an unpaired UTF-16
# surrogate (a lone "\ud800" escape decodes to one; psycopg cannot encode it as UTF-8). JSON's
# valid surrogate pairs decode to one character and never match.
REFUSED_IN_TEXT = re.compile("[\x00\ud800-\udfff]")
REFUSED_TEXT_MESSAGE = "text holds a character the database cannot store (NUL or an unpaired surrogate)"


def refused_text_at(value: object, where: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """Where in a decoded JSON value (keys included) the first unstorable text is, or None."""
    if isinstance(value, str):
        return where if REFUSED_IN_TEXT.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if REFUSED_IN_TEXT.search(key):
                return (*where, key)
            found = refused_text_at(item, (*where, key))
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = refused_text_at(item, (*where, str(index)))
            if found is not None:
                return found
    return None

