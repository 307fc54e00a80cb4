"""Exponential backoff with jitter, for retrying a server that does not answer.

Delay n (from 0) is drawn from [d/2, d] with d = min(cap, base * factor**n) ("equal jitter"):
the envelope grows exponentially up to the cap, and agents that lost the server at the same
moment do not come back in lockstep, while every wait stays at least half the envelope.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class Backoff:
    base: float = 1.0
    factor: float = 2.0
    cap: float = 60.0
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        if not (self.base > 0 and self.factor >= 1 and self.cap >= self.base):
            raise ValueError(f"bad backoff: base {self.base}, factor {self.factor}, cap {self.cap}")

    def envelope(self, n: int) -> float:
        """The upper bound of delay ``n``."""
        # exponent clamped: factor**n overflows a float long before an agent gives up
        return min(self.cap, self.base * self.factor ** min(n, 64))

    def delays(self) -> Iterator[float]:
        """An endless sequence of delays."""
        n = 0
        while True:
            d = self.envelope(n)
            yield d / 2 + self.rng.uniform(0, d / 2)
            n += 1
