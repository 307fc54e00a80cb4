"""Integers a request may carry into SQL, bounded to the column they meet.

A number past the column's range (2^63 and up for BIGINT ids) is not a missing row but a driver
error; declared here once, every route answers it 422 with the error envelope instead.
"""

from __future__ import annotations

from typing import Annotated

from annotated_types import Interval

BIGINT_MAX = 2**63 - 1  # ids (BigId), OFFSET
INTEGER_MAX = 2**31 - 1  # attempts, branch positions

DbId = Annotated[int, Interval(ge=-BIGINT_MAX - 1, le=BIGINT_MAX)]
DbInt = Annotated[int, Interval(ge=-INTEGER_MAX - 1, le=INTEGER_MAX)]
DbOffset = Annotated[int, Interval(ge=0, le=BIGINT_MAX)]
