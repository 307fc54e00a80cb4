"""At most N requests of a server process in the database at once, claims before uploads.

The hot agent endpoints (claim, upload) wait here on the event loop instead of all entering the
threadpool: past a few concurrent requests a process only adds GIL and connection contention.
When a slot frees, a waiting claim gets it before any waiting upload. An agent waiting on a claim
is a bench machine standing idle; an agent waiting on an upload already has its result in its
spool. So at saturation the queueing falls on uploads, and claims stay short.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class DatabaseSlots:
    """A capacity limiter with two queues (urgent first). One per event loop; not thread-safe."""

    def __init__(self, capacity: int) -> None:
        self.free = capacity
        self._urgent: deque[asyncio.Future[None]] = deque()
        self._normal: deque[asyncio.Future[None]] = deque()

    @asynccontextmanager
    async def slot(self, urgent: bool) -> AsyncIterator[None]:
        await self._acquire(urgent)
        try:
            yield
        finally:
            self._release()

    @property
    def waiting(self) -> int:
        return sum(not f.done() for f in (*self._urgent, *self._normal))

    async def _acquire(self, urgent: bool) -> None:
        if self.free > 0 and not self.waiting:
            self.free -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        (self._urgent if urgent else self._normal).append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release()  # handed a slot just as the request was cancelled: pass it on
            raise

    def _release(self) -> None:
        for queue in (self._urgent, self._normal):
            while queue:
                future = queue.popleft()
                if not future.done():
                    future.set_result(None)  # the slot passes straight to this waiter
                    return
        self.free += 1
